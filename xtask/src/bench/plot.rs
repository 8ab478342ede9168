//! One PNG per scenario and kernel (the first repeat that has results): each load's pauses over
//! time above, dirty and writeback memory below, with the offender's window and the daemon's
//! restrict/release moments marked on both.
use std::path::PathBuf;

use anyhow::{Context as _, Result, anyhow};
use plotters::{
    prelude::*,
    style::{FontStyle, register_font},
};

use super::{matrix::Plan, results::Run};

/// Read at run time (Debian's fonts-dejavu-core) so the build needs no font files or
/// fontconfig; ab_glyph renders it.
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
const FONT_PACKAGE: &str = "fonts-dejavu-core";

pub fn timelines(plan: &Plan, runs: &[Run]) -> Result<Vec<PathBuf>> {
    register()?;
    let mut written = Vec::new();
    for scenario in &plan.scenarios {
        for kernel in &plan.kernels {
            let Some(run) = runs
                .iter()
                .find(|r| r.scenario == *scenario && r.kernel == *kernel)
            else {
                continue;
            };
            let path = plan.out.join(format!(
                "timeline-{}-{kernel}.png",
                super::matrix::slug(scenario)
            ));
            draw(run, &path, plan.duration as f64)
                .with_context(|| format!("drawing {}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

fn register() -> Result<()> {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if DONE.get().is_some() {
        return Ok(());
    }
    if !FONT_FILES.iter().any(|f| std::path::Path::new(f).is_file()) {
        crate::setup::apt_install(&[FONT_PACKAGE])?;
    }
    let file = FONT_FILES
        .iter()
        .find(|f| std::path::Path::new(f).is_file())
        .with_context(|| format!("no font found; install {FONT_PACKAGE}"))?;
    // plotters keeps the font for the process's lifetime and wants 'static bytes.
    let bytes: &'static [u8] = Box::leak(std::fs::read(file)?.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{file} is not a font ab_glyph can read"))?;
    let _ = DONE.set(());
    Ok(())
}

const LOAD_COLORS: &[(&str, RGBColor)] = &[
    ("control", RGBColor(150, 150, 150)),
    ("write", RGBColor(31, 119, 180)),
    ("multiwrite", RGBColor(214, 39, 40)),
];
const RESTRICT: RGBColor = RGBColor(44, 160, 44);
const RELEASE: RGBColor = RGBColor(0, 0, 0);

fn draw(run: &Run, path: &std::path::Path, duration: f64) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("{e}");
    let root = BitMapBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(420);
    let x_max = run
        .timeline
        .iter()
        .map(|s| s.t)
        .chain(run.loads.iter().flat_map(|l| l.pauses.iter().map(|p| p.0)))
        .fold(duration + 1.0, f64::max);
    let pause_max = run
        .loads
        .iter()
        .map(|l| l.longest_pause_s)
        .fold(0.1, f64::max)
        * 1.1;
    let title = format!(
        "{} on {} (repeat {}): pauses of the innocent loads",
        run.scenario,
        run.kernel,
        run.repeat + 1
    );
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..pause_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .y_desc("pause (s)")
        .x_desc("time since the loads started (s)")
        .draw()
        .map_err(|e| err(&e))?;
    offender_band(&mut chart, run, pause_max).map_err(|e| err(&e))?;
    for load in &run.loads {
        let color = LOAD_COLORS
            .iter()
            .find(|(n, _)| *n == load.name)
            .map_or(BLACK, |c| c.1);
        // A stem per late cycle: pauses are events, not a continuous signal.
        chart
            .draw_series(
                load.pauses
                    .iter()
                    .map(|&(t, p)| PathElement::new(vec![(t, 0.0), (t, p)], color.stroke_width(2))),
            )
            .map_err(|e| err(&e))?
            .label(format!(
                "{} (longest {:.2} s)",
                load.name, load.longest_pause_s
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
    }
    actions(&mut chart, run, pause_max).map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;

    let mb_max = run
        .timeline
        .iter()
        .map(|s| s.dirty_mb.max(s.writeback_mb))
        .fold(10.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            "dirty and writeback memory (/proc/vmstat)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..mb_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .y_desc("MB")
        .x_desc("time since the loads started (s)")
        .draw()
        .map_err(|e| err(&e))?;
    offender_band(&mut chart, run, mb_max).map_err(|e| err(&e))?;
    let series: [(&str, RGBColor, Pick); 2] = [
        ("dirty", RGBColor(255, 127, 14), |s| s.dirty_mb),
        ("writeback", RGBColor(148, 103, 189), |s| s.writeback_mb),
    ];
    for (name, color, pick) in series {
        chart
            .draw_series(LineSeries::new(
                run.timeline.iter().map(|s| (s.t, pick(s))),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
    }
    actions(&mut chart, run, mb_max).map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Which number of a vmstat sample a line shows.
type Pick = fn(&super::results::Sample) -> f64;

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;
type DrawResult =
    Result<(), DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>>;

/// The offender's writing window, lightly shaded.
fn offender_band(chart: &mut Chart, run: &Run, y_max: f64) -> DrawResult {
    if let Some((a, b)) = run.offender {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, y_max)],
            RGBColor(255, 200, 120).mix(0.15).filled(),
        )))?;
    }
    Ok(())
}

/// Dashed-looking vertical lines where the daemon restricted (green), released or measured the
/// disk (black, labelled).
fn actions(chart: &mut Chart, run: &Run, y_max: f64) -> DrawResult {
    for (t, kind) in &run.actions {
        let color = if kind == "restrict" {
            RESTRICT
        } else {
            RELEASE
        };
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*t, 0.0), (*t, y_max)],
            color.stroke_width(2),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            kind.clone(),
            (*t, y_max * 0.97),
            ("sans-serif", 14).into_font().color(&color),
        )))?;
    }
    Ok(())
}

//! One PNG per scenario and kernel (the first repeat that has results): each load's pauses over
//! time above, dirty and writeback memory below, with the offender's window and the daemon's
//! restrict/release moments marked on both.
use std::path::PathBuf;

use anyhow::{Context as _, Result, anyhow};
use plotters::{
    prelude::*,
    style::{FontStyle, register_font},
};

use super::{frontier, matrix::Plan, results::Run};

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

/// One PNG per kernel (`frontier-KERNEL.png`): each scenario's innocents' longest pause (median,
/// the bar from the best to the worst run) against its offender's speed x none.
pub fn frontiers(plan: &Plan, runs: &[Run], innocents: &[&str]) -> Result<Vec<PathBuf>> {
    register()?;
    let mut written = Vec::new();
    for kernel in &plan.kernels {
        let points = frontier::points(&plan.scenarios, kernel, runs, innocents);
        if points.iter().all(|p| p.speed.is_none()) {
            continue;
        }
        let path = plan.out.join(format!("frontier-{kernel}.png"));
        draw_frontier(kernel, &points, &path)
            .with_context(|| format!("drawing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

const PALETTE: &[RGBColor] = &[
    RGBColor(0, 0, 0),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Issue 10's targets, drawn as lines: every innocent pause under 0.25 s, the offender at 0.8 of
/// its unmitigated speed or more.
const TARGET_PAUSE_S: f64 = 0.25;
const TARGET_SPEED: f64 = 0.8;

/// Legends longer than this are cut: a scenario that presets iocost spells out its lines.
const LABEL_CHARS: usize = 90;

fn draw_frontier(kernel: &str, points: &[frontier::Point], path: &std::path::Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("{e}");
    let shown: Vec<(&frontier::Point, f64)> = points
        .iter()
        .filter_map(|p| p.speed.map(|s| (p, s)))
        .collect();
    let x_max = shown.iter().map(|(_, s)| *s).fold(1.2, f64::max) * 1.1;
    // Pauses span 0.01 s to several seconds: a log scale keeps both ends readable.
    let y_min = shown
        .iter()
        .map(|(p, _)| p.pause.min)
        .fold(0.05, f64::min)
        .max(0.005)
        * 0.8;
    let y_max = shown.iter().map(|(p, _)| p.pause.max).fold(1.0, f64::max) * 1.5;
    let root = BitMapBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    // The legend below the chart: scenario names are long, and any corner of the chart may
    // hold a point.
    let legend_height = 30 + 22 * shown.len() as u32;
    let (top, bottom) = root.split_vertically(900 - legend_height.min(400));
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!("{kernel}: the innocents' longest pause against the offender's speed"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .y_desc("innocents' longest pause s (median; bar: best to worst run)")
        .x_desc("offender's speed x none (same bench)")
        .draw()
        .map_err(|e| err(&e))?;
    let target = RGBColor(120, 120, 120);
    chart
        .draw_series([
            PathElement::new(vec![(0.0, TARGET_PAUSE_S), (x_max, TARGET_PAUSE_S)], target),
            PathElement::new(vec![(TARGET_SPEED, y_min), (TARGET_SPEED, y_max)], target),
        ])
        .map_err(|e| err(&e))?;
    chart
        .draw_series(std::iter::once(Text::new(
            format!("target: {TARGET_PAUSE_S} s, {TARGET_SPEED}x"),
            (TARGET_SPEED + 0.01, TARGET_PAUSE_S * 1.05),
            ("sans-serif", 14).into_font().color(&target),
        )))
        .map_err(|e| err(&e))?;
    for (i, (p, speed)) in shown.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let speed = *speed;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(speed, p.pause.min), (speed, p.pause.max)],
                color.stroke_width(2),
            )))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((speed, p.pause.median))
                    + Circle::new((0, 0), 6, color.filled())
                    + Text::new(
                        format!("{}", i + 1),
                        (8, -18),
                        ("sans-serif", 16).into_font().color(&color),
                    ),
            ))
            .map_err(|e| err(&e))?;
    }
    let font = ("sans-serif", 15).into_font();
    for (i, (p, speed)) in shown.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut name: String = p.scenario.chars().take(LABEL_CHARS).collect();
        if p.scenario.chars().count() > LABEL_CHARS {
            name.push_str("...");
        }
        let on = if p.beaten_by.is_none() {
            ", on the frontier"
        } else {
            ""
        };
        let y = 10 + 22 * i as i32;
        bottom
            .draw(&Circle::new((30, y + 8), 5, color.filled()))
            .map_err(|e| err(&e))?;
        bottom
            .draw(&Text::new(
                format!(
                    "{}: {name} ({:.2} s, {speed:.2}x{on})",
                    i + 1,
                    p.pause.median
                ),
                (45, y),
                font.clone().color(&BLACK),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
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

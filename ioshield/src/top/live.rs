//! `top --watch` on a terminal: a full-screen view redrawn in place (as bpftop and iotop do),
//! with keys to sort, filter and quit.
use std::time::Duration;

use anyhow::{Context as _, Result};
use ratatui::{
    DefaultTerminal, Frame,
    crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers},
    layout::{Constraint, Layout as Split},
    style::{Modifier, Style},
    text::Line,
    widgets::{Cell, Paragraph, Row, Table},
};
use tokio::sync::mpsc;

use super::{
    Sampler,
    report::Report,
    table::{self, HEADERS},
    view::{SortKey, View},
};

const HELP: &str =
    "q quit  s/→ next sort  ← previous sort  r reverse  o only writers  c command line";

/// Puts the terminal back however the view ends (an error, a signal, a panic is handled by
/// ratatui's own hook).
struct Screen(DefaultTerminal);

impl Drop for Screen {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

struct State {
    view: View,
    cmdline: bool,
    /// Unfiltered, so that a key that changes the view redraws at once from it.
    report: Option<Report>,
}

pub async fn run(
    sampler: &mut Sampler,
    view: View,
    cmdline: bool,
    interval: Duration,
    limit: u64,
) -> Result<()> {
    let screen = ratatui::try_init().context("cannot take over the terminal for the live view")?;
    let mut screen = Screen(screen);
    let mut keys = key_reader();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut state = State {
        view,
        cmdline,
        report: None,
    };
    let mut shown = 0;
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        screen.0.draw(|f| draw(f, &state, interval))?;
        tokio::select! {
            () = tokio::time::sleep_until(next) => {
                next += interval;
                state.report = Some(sampler.next()?);
                shown += 1;
            }
            key = keys.recv() => match key {
                // The terminal is gone (or the reader failed): nothing left to show on.
                None => break,
                Some(k) if quits(&k) => break,
                Some(k) => press(&mut state, k),
            },
            _ = term.recv() => break,
        }
        if shown >= limit {
            break;
        }
    }
    drop(screen);
    Ok(())
}

/// Terminal events come from a blocking read; a thread hands the keys to the async loop.
fn key_reader() -> mpsc::UnboundedReceiver<KeyEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        loop {
            match event::read() {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                    if tx.send(k).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    rx
}

fn quits(k: &KeyEvent) -> bool {
    matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
        || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
}

fn press(state: &mut State, k: KeyEvent) {
    match k.code {
        KeyCode::Char('s') | KeyCode::Right | KeyCode::Tab => {
            state.view.sort = state.view.sort.step(1);
        }
        KeyCode::Left | KeyCode::BackTab => state.view.sort = state.view.sort.step(-1),
        KeyCode::Char('r') => state.view.reverse = !state.view.reverse,
        KeyCode::Char('o') => state.view.only_active = !state.view.only_active,
        KeyCode::Char('c') => state.cmdline = !state.cmdline,
        _ => {}
    }
}

/// Columns of numbers, aligned right as in the plain table.
const NUMERIC: [usize; 4] = [0, 3, 4, 5];

/// The column each sort key orders by, to mark it in the header.
fn column_of(key: SortKey) -> usize {
    match key {
        SortKey::Pid => 0,
        SortKey::User => 1,
        SortKey::Device => 2,
        SortKey::Dirty => 3,
        SortKey::Tree => 4,
        SortKey::Throttled => 5,
        SortKey::Unit => 6,
        SortKey::Command => 7,
    }
}

fn draw(f: &mut Frame, state: &State, interval: Duration) {
    let Some(report) = &state.report else {
        let waiting = format!(
            "ioshield top: first window of {:.1} s ...\n\n{HELP}",
            interval.as_secs_f64()
        );
        f.render_widget(Paragraph::new(waiting), f.area());
        return;
    };
    let summary: Vec<Line> = table::summary(report).into_iter().map(Line::from).collect();
    let sorting = format!(
        "sorted by {}{}{} | {HELP}",
        state.view.sort.name(),
        if state.view.reverse { ", reversed" } else { "" },
        if state.view.only_active {
            ", only writers"
        } else {
            ""
        },
    );
    let [top, body, foot] = Split::vertical([
        Constraint::Length(summary.len() as u16),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(summary), top);
    f.render_widget(
        Paragraph::new(sorting).style(Style::new().add_modifier(Modifier::REVERSED)),
        foot,
    );
    let shown = state.view.rows(report);
    if shown.is_empty() {
        let text = table::nothing_dirtied(report, state.view.filters());
        f.render_widget(Paragraph::new(format!("\n{text}")), body);
        return;
    }
    let marked = column_of(state.view.sort);
    let header = Row::new(HEADERS.iter().enumerate().map(|(i, h)| {
        let text = if i == marked {
            let arrow = if state.view.reverse { "▲" } else { "▼" };
            Line::from(format!("{h}{arrow}")).style(Style::new().add_modifier(Modifier::BOLD))
        } else {
            Line::from(*h)
        };
        Cell::from(if NUMERIC.contains(&i) {
            text.right_aligned()
        } else {
            text
        })
    }))
    .style(Style::new().add_modifier(Modifier::UNDERLINED));
    let rows = shown.iter().map(|p| {
        Row::new(
            table::cells(p, state.cmdline)
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    if NUMERIC.contains(&i) {
                        Cell::from(Line::from(c).right_aligned())
                    } else {
                        Cell::from(c)
                    }
                }),
        )
    });
    let widths = [
        Constraint::Length(8),
        Constraint::Length(10),
        Constraint::Length(12),
        Constraint::Length(11),
        Constraint::Length(10),
        Constraint::Length(15),
        Constraint::Length(24),
        Constraint::Min(10),
    ];
    f.render_widget(Table::new(rows, widths).header(header), body);
}

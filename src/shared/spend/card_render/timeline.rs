//! The page's timeline: an inline SVG of the run's requests and commands,
//! one lane each, on a time axis with round ticks.

use super::*;
use std::fmt::Write;

/// The timeline's size: the label column, the plot and one lane.
pub(super) const W: f64 = 1060.0;
pub(super) const LABEL: f64 = 220.0;
pub(super) const PLOT: f64 = W - LABEL - 20.0;
pub(super) const LANE: f64 = 30.0;
/// Commands drawn one lane each, at most (the rest are in the table).
pub(super) const LANES: usize = 40;

/// Tick spacing over `span` ms: 1, 2 or 5 times a power of ten, about
/// six ticks.
pub(super) fn tick_step(span: f64) -> f64 {
    let rough = (span / 6.0).max(1.0);
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

pub(super) fn tick_label(ms: f64) -> String {
    if ms == 0.0 {
        return "0".into();
    }
    if ms < 1000.0 {
        return format!("{} ms", ms.round());
    }
    if ms < 60_000.0 {
        let s = ms / 1000.0;
        return match s.fract() == 0.0 {
            true => format!("{s} s"),
            false => format!("{s:.1} s"),
        };
    }
    duration(ms)
}

/// Where the timeline draws: the run's span in ms, the first lane's top
/// and the SVG's height.
struct Plot {
    span: f64,
    top: f64,
    height: f64,
}

impl Plot {
    /// The x of `ms` after the run began.
    fn x(&self, ms: f64) -> f64 {
        LABEL + (ms.clamp(0.0, self.span) / self.span) * PLOT
    }
}

/// The inline SVG of the run's time: requests on one lane, each command
/// on its own, from the run's beginning to its end (or the log's).
pub(super) fn timeline(card: &Value) -> String {
    let Some(t0) = epoch_ms(str_of(&card["began"])) else {
        return "<p class=\"empty\">No time to draw a timeline on.</p>".into();
    };
    let requests = list(&card["requests"]);
    let commands = list(&card["commands"]);
    let spans_r = request_spans(requests, t0);
    let ended = card["ended"].as_str().and_then(epoch_ms).map(|e| e - t0);
    let span = last_ms(ended, &spans_r, commands, t0).max(1.0);
    let lanes = usize::from(!requests.is_empty()) + commands.len().min(LANES);
    let top = 34.0;
    let height = top + (lanes.max(1) as f64) * LANE + 16.0;
    let plot = Plot { span, top, height };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg viewBox="0 0 {W} {height}" role="img" aria-label="timeline of the run">"#
    );
    axis(&mut svg, &plot);
    run_marks(&mut svg, &plot, ended);
    // One lane after another, top down: the requests', then each command's.
    let (mut y, mut i) = (top, 0);
    if !requests.is_empty() {
        request_lane(&mut svg, &plot, (y, i), requests, &spans_r);
        y += LANE;
        i += 1;
    }
    for c in commands.iter().take(LANES) {
        command_lane(&mut svg, &plot, (y, i), c, since(&c["time"], t0));
        y += LANE;
        i += 1;
    }
    if lanes == 0 {
        let _ = write!(
            svg,
            r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">nothing ran and no model was asked during the run</text>"#,
            LABEL + PLOT / 2.0,
            top + LANE / 2.0 + 4.0,
        );
    }
    svg.push_str("</svg>");
    below_the_plot(&mut svg, commands.len());
    svg
}

/// A time's ms after the run began at `t0`.
fn since(v: &Value, t0: f64) -> Option<f64> {
    epoch_ms(str_of(v)).map(|t| t - t0)
}

/// Each request's [start, end] in ms after the run began.
fn request_spans(requests: &[Value], t0: f64) -> Vec<(f64, f64)> {
    requests
        .iter()
        .filter_map(|r| {
            let end = since(&r["time"], t0)?;
            let took = r["duration_ms"].as_f64().unwrap_or(0.0);
            Some(((end - took).max(0.0), end))
        })
        .collect()
}

/// The last ms drawn: the run's end, or the latest request's or
/// command's end if later.
fn last_ms(ended: Option<f64>, spans_r: &[(f64, f64)], commands: &[Value], t0: f64) -> f64 {
    let mut last = ended.unwrap_or(0.0);
    for &(_, e) in spans_r {
        last = last.max(e);
    }
    for c in commands {
        if let Some(s) = since(&c["time"], t0) {
            last = last.max(s + c["duration_ms"].as_f64().unwrap_or(0.0));
        }
    }
    last
}

/// Axis: ticks over the run's time.
fn axis(svg: &mut String, plot: &Plot) {
    let (span, top, height) = (plot.span, plot.top, plot.height);
    let step = tick_step(span);
    let mut tick = 0.0;
    while tick <= span + 1e-9 {
        let tx = plot.x(tick);
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#edf0f5"/><text class="axis" x="{tx:.1}" y="16" text-anchor="middle">{}</text>"##,
            top - 8.0,
            height - 10.0,
            esc(&tick_label(tick)),
        );
        tick += step;
    }
}

/// The run's beginning and end (or where the log ends, dashed).
fn run_marks(svg: &mut String, plot: &Plot, ended: Option<f64>) {
    let (span, top, height) = (plot.span, plot.top, plot.height);
    let x = |ms: f64| plot.x(ms);
    let end_mark = match ended {
        Some(_) => r##"stroke="#1d2433""##,
        None => r##"stroke="#3b82f6" stroke-dasharray="4 3""##,
    };
    let _ = write!(
        svg,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#1d2433" stroke-width="1.5"><title>run began</title></line><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" {end_mark} stroke-width="1.5"><title>{}</title></line>"##,
        x(0.0),
        top - 8.0,
        x(0.0),
        height - 10.0,
        x(span),
        top - 8.0,
        x(span),
        height - 10.0,
        match ended {
            Some(_) => "run ended",
            None => "the log ends here: the run is open",
        },
    );
}

/// A lane's background (every other lane shaded) and its label.
fn lane_bg(svg: &mut String, y: f64, label: &str, full: &str, i: usize) {
    if i.is_multiple_of(2) {
        let _ = write!(
            svg,
            r##"<rect x="0" y="{y:.1}" width="{W}" height="{LANE}" fill="#f8f9fb"/>"##
        );
    }
    let _ = write!(
        svg,
        r#"<text x="8" y="{:.1}"><title>{}</title>{}</text>"#,
        y + LANE / 2.0 + 4.0,
        esc(full),
        esc(label),
    );
}

/// The model requests' lane, at `y`, the `i`th: a bar each.
fn request_lane(
    svg: &mut String,
    plot: &Plot,
    (y, i): (f64, usize),
    requests: &[Value],
    spans_r: &[(f64, f64)],
) {
    let n = requests.len();
    let label = format!("model requests ({n})");
    lane_bg(svg, y, &label, &label, i);
    for (r, &(s, e)) in requests.iter().zip(spans_r) {
        let color = match (r["cut"] == true, r["refused"].is_string()) {
            (true, _) => "#e08a00",
            (_, true) => "#d64545",
            _ => "#4f6bd8",
        };
        let (x0, x1) = (plot.x(s), plot.x(e));
        let tip = format!(
            "{} · {} · {} in, {} out{}",
            str_of(&r["model"]),
            dollars(u64_of(&r["micro_usd"])),
            u64_of(&r["input_tokens"]),
            u64_of(&r["output_tokens"]),
            match request_note(r).as_str() {
                "" => String::new(),
                n => format!(" · {n}"),
            },
        );
        let _ = write!(
            svg,
            r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="3" fill="{color}" fill-opacity="0.85"><title>{}</title></rect>"#,
            y + 7.0,
            (x1 - x0).max(4.0),
            LANE - 14.0,
            esc(&tip),
        );
    }
}

/// A command's lane, at `y`, the `i`th: its bar from `start` (if it has
/// a time), and its ending beside the bar.
fn command_lane(
    svg: &mut String,
    plot: &Plot,
    (y, i): (f64, usize),
    c: &Value,
    start: Option<f64>,
) {
    let argv = argv_line(&c["argv"]);
    let label = format!("#{} {}", u64_of(&c["command"]), cut(&argv, 26));
    lane_bg(svg, y, &label, &argv, i);
    let Some(s) = start else {
        return;
    };
    let (words, kind) = ending(c);
    let short = match kind {
        "limit" => format!("{} limit", str_of(&c["limit"])),
        _ => words.clone(),
    };
    let (e, open) = match c["duration_ms"].as_f64() {
        Some(d) => (s + d, false),
        None => (plot.span, true),
    };
    let color = match kind {
        "ok" => "#2f9e63",
        "fail" => "#d64545",
        "limit" => "#e08a00",
        "signal" => "#8a5cd6",
        _ => "#3b82f6",
    };
    let (x0, x1) = (plot.x(s), plot.x(e));
    let w = (x1 - x0).max(4.0);
    let took = c["duration_ms"]
        .as_f64()
        .map(|d| format!(" · {}", duration(d)))
        .unwrap_or_default();
    let _ = write!(
        svg,
        r#"<rect x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" rx="4" fill="{color}"{}><title>{}</title></rect>"#,
        y + 6.0,
        LANE - 12.0,
        match open {
            true => r#" fill-opacity="0.45""#,
            false => "",
        },
        esc(&format!("{argv} · {words}{took}")),
    );
    ending_label(svg, (x0, w, y), &short);
}

/// A command's ending, beside its bar (inside it where the bar ends near
/// the plot's right edge).
fn ending_label(svg: &mut String, (x0, w, y): (f64, f64, f64), short: &str) {
    let room = 7.0 * short.chars().count() as f64;
    let (tx, anchor, fill) = match x0 + w + 8.0 + room > W - 4.0 {
        true if w > room + 12.0 => (x0 + w - 6.0, "end", "#fff"),
        true => (x0 - 6.0, "end", "#5d6779"),
        false => (x0 + w + 6.0, "start", "#5d6779"),
    };
    let _ = write!(
        svg,
        r#"<text x="{tx:.1}" y="{:.1}" text-anchor="{anchor}" style="fill:{fill}">{}</text>"#,
        y + LANE / 2.0 + 4.0,
        esc(short),
    );
}

/// After the SVG: a word on the commands not drawn, and the legend.
fn below_the_plot(svg: &mut String, commands: usize) {
    if commands > LANES {
        let _ = write!(
            svg,
            r#"<p class="empty">The first {LANES} of {} commands are drawn; the table lists them all.</p>"#,
            commands
        );
    }
    svg.push_str(
        r##"<div class="legend"><span><i style="background:#4f6bd8"></i>model request</span><span><i style="background:#e08a00"></i>request cut at the budget; command stopped by a limit</span><span><i style="background:#d64545"></i>request refused; command failed</span><span><i style="background:#2f9e63"></i>command exited 0</span><span><i style="background:#8a5cd6"></i>command ended by a signal</span></div>"##,
    );
}

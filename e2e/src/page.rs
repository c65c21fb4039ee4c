//! The report as a self-contained HTML page, for people who would rather look: the verdicts, the
//! latency distribution of each answer code and the answers over time, drawn as inline SVG.

use std::fmt::Write;

use crate::report::Report;

const COLORS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const W: f64 = 720.0;
const H: f64 = 300.0;
const PAD: f64 = 50.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The page.
pub fn html(r: &Report) -> String {
    let mut s = String::new();
    let verdict = if r.passed() { "PASS" } else { "FAIL" };
    let _ = write!(
        s,
        "<!doctype html><meta charset=utf-8><title>flash sale report: {verdict}</title>\
         <style>body{{font:14px sans-serif;max-width:760px;margin:2em auto}}.ok{{color:#2ca02c}}.bad{{color:#d62728}}\
         td{{padding:0 .6em}}</style><h1>Flash sale report: <span class={}>{verdict}</span></h1>",
        if r.passed() { "ok" } else { "bad" }
    );
    let _ = write!(
        s,
        "<p>{} users, {} order attempts in {:.2} s ({:.0}/s at the gateway); drain {:.2} s; orders {:?}; payments {:?}</p><table>",
        r.users, r.attempts, r.burst_secs, r.attempts_per_sec, r.drain_secs, r.checks.orders, r.payments
    );
    for v in &r.verdicts {
        let _ = write!(
            s,
            "<tr><td class={}>{}</td><td>{}</td><td>{}</td></tr>",
            if v.ok { "ok" } else { "bad" },
            if v.ok { "PASS" } else { "FAIL" },
            esc(v.name),
            esc(&v.detail)
        );
    }
    s.push_str("</table><h2>Latency by answer (ms, log scale) against percentile</h2>");
    s.push_str(&latency_svg(r));
    s.push_str("<h2>Answers per 250 ms of the burst</h2>");
    s.push_str(&timeline_svg(r));
    s
}

fn legend(s: &mut String, names: &[&String]) {
    for (i, n) in names.iter().enumerate() {
        let _ = write!(
            s,
            "<text x='{}' y='{}' fill='{}' font-size='12'>{}</text>",
            W - 170.0,
            20.0 + 15.0 * i as f64,
            COLORS[i % COLORS.len()],
            esc(n)
        );
    }
}

/// x: percentile as nines (0, 90, 99, 99.9, 99.99, 100); y: log10 of milliseconds.
fn latency_svg(r: &Report) -> String {
    let mut s = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}'>");
    let nines = |q: f64| (-(1.0 - q).max(1e-5).log10()).min(5.0);
    let x = |q: f64| PAD + nines(q) / 5.0 * (W - 2.0 * PAD - 120.0);
    let max_ms = r.latency_ms.values().map(|l| l.max).fold(1.0f64, f64::max);
    let top = max_ms.log10().ceil().max(1.0);
    let y = |ms: f64| H - PAD - (ms.max(0.01).log10() + 2.0) / (top + 2.0) * (H - 2.0 * PAD);
    for (i, label) in ["0", "90", "99", "99.9", "99.99", "100"].iter().enumerate() {
        let q = 1.0 - 10f64.powi(-(i as i32));
        let q = if i == 0 {
            0.0
        } else if i == 5 {
            1.0
        } else {
            q
        };
        let _ = write!(s, "<text x='{}' y='{}' font-size='11'>{label}</text>", x(q) - 8.0, H - PAD + 15.0);
    }
    let mut decade = -2.0;
    while decade <= top {
        let ms = 10f64.powf(decade);
        let _ = write!(
            s,
            "<line x1='{PAD}' x2='{}' y1='{1}' y2='{1}' stroke='#ddd'/><text x='5' y='{1}' font-size='11'>{ms}</text>",
            W - PAD - 120.0,
            y(ms)
        );
        decade += 1.0;
    }
    let names: Vec<&String> = r.latency_ms.keys().collect();
    for (i, (_, l)) in r.latency_ms.iter().enumerate() {
        let points: Vec<String> =
            l.curve.iter().map(|&(q, ms)| format!("{:.1},{:.1}", x(q), y(ms))).collect();
        polyline(&mut s, i, &points);
    }
    legend(&mut s, &names);
    s.push_str("</svg>");
    s
}

/// The `i`-th series' line through `points` ("x,y" each).
fn polyline(s: &mut String, i: usize, points: &[String]) {
    let _ = write!(
        s,
        "<polyline fill='none' stroke-width='2' stroke='{}' points='{}'/>",
        COLORS[i % COLORS.len()],
        points.join(" ")
    );
}

/// One line per answer code: answers in each 250 ms of the burst.
fn timeline_svg(r: &Report) -> String {
    let mut s = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}'>");
    let mut names: Vec<&String> = r.timeline.iter().flat_map(|m| m.keys()).collect();
    names.sort();
    names.dedup();
    let peak = r.timeline.iter().flat_map(|m| m.values()).copied().max().unwrap_or(1).max(1) as f64;
    let n = r.timeline.len().max(2) as f64;
    let x = |i: usize| PAD + i as f64 / (n - 1.0) * (W - 2.0 * PAD - 120.0);
    let y = |v: u64| H - PAD - v as f64 / peak * (H - 2.0 * PAD);
    let _ = write!(
        s,
        "<text x='5' y='{}' font-size='11'>{peak}</text><text x='{}' y='{}' font-size='11'>{:.2} s</text>",
        y(peak as u64),
        x(r.timeline.len().saturating_sub(1)) - 20.0,
        H - PAD + 15.0,
        r.timeline.len() as f64 * 0.25
    );
    for (i, name) in names.iter().enumerate() {
        let points: Vec<String> = r
            .timeline
            .iter()
            .enumerate()
            .map(|(t, m)| format!("{:.1},{:.1}", x(t), y(m.get(*name).copied().unwrap_or(0))))
            .collect();
        polyline(&mut s, i, &points);
    }
    legend(&mut s, &names);
    s.push_str("</svg>");
    s
}

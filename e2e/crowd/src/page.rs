//! The report as a self-contained HTML page, the one an operator shows after a sale: the
//! headline figures, then the sale's story on one time axis (seconds from the window's opening:
//! the stock left and the orders written, the answers per second by code, stacked, the
//! latency's p50 and p99, the reservation calls to Redis, the Kafka backlog, the shop route's
//! latency when the sale had shop traffic), then the latency distribution by answer, the
//! invariants and the answers by kind. Charts are inline SVG with ticks and units on both axes;
//! every answer code has its own colour, the same in every chart, from colour-blind-safe
//! palettes, and legends are HTML beside the charts (never cut).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::report::Report;

const W: f64 = 900.0;
const H: f64 = 240.0;
/// Plot margins: left (y labels), right, top, bottom (x labels and the axis title).
const ML: f64 = 70.0;
const MR: f64 = 16.0;
const MT: f64 = 14.0;
const MB: f64 = 42.0;

/// Each answer code's colour: Paul Tol's muted palette and the Okabe–Ito palette, both made to
/// stay apart for the common colour-vision deficiencies; the legend also names every code.
const CODE_COLORS: [(&str, &str); 17] = [
    ("QUEUED", "#117733"),
    ("SOLD_OUT", "#BBBBBB"),
    ("LIMIT_REACHED", "#332288"),
    ("RATE_LIMITED", "#DDCC77"),
    ("SERVICE_DEGRADED", "#CC6677"),
    ("BAD_SIGNATURE", "#882255"),
    ("BAD_TOKEN", "#88CCEE"),
    ("REPLAY", "#AA4499"),
    ("STALE_TIMESTAMP", "#999933"),
    ("QUEUED_SAME_ID", "#44AA99"),
    ("NOT_STARTED", "#E69F00"),
    ("TRY_LATER", "#0072B2"),
    ("TOKEN_EXPIRED", "#56B4E9"),
    ("NOT_ELIGIBLE", "#D55E00"),
    ("ERROR", "#000000"),
    ("ENDED", "#661100"),
    ("BAD_PATH", "#F0E442"),
];
/// `QUEUED_AFTER_*` (a copy of a buyer's request reserved where the buyer's own had not).
const QUEUED_AFTER: &str = "#CC79A7";
/// Any other code.
const OTHER: &str = "#555555";

/// The colour of answer `code`.
pub fn code_color(code: &str) -> &'static str {
    if code.starts_with("QUEUED_AFTER_") {
        return QUEUED_AFTER;
    }
    CODE_COLORS.iter().find(|(c, _)| *c == code).map_or(OTHER, |(_, col)| col)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Ticks for `lo..=hi`: about `n` round values (1, 2 or 5 times a power of ten).
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step =
        [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= n as f64).unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// A tick's label: no trailing zeros, thousands as `k`.
fn label(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{}k", trim(v / 1000.0))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One line of a chart.
struct Line {
    name: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

/// A vertical marker on the time axis.
struct Mark {
    t: f64,
    text: &'static str,
}

/// A chart's frame: the ranges, the axes with their ticks and titles.
struct Frame {
    x: (f64, f64),
    y: (f64, f64),
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        ML + (x - self.x.0) / (self.x.1 - self.x.0).max(1e-9) * (W - ML - MR)
    }

    fn py(&self, y: f64) -> f64 {
        H - MB - (y - self.y.0) / (self.y.1 - self.y.0).max(1e-9) * (H - MT - MB)
    }

    /// Opens the SVG and draws the grid, the ticks, their labels and the axis titles.
    fn open(&self, s: &mut String, x_title: &str, y_title: &str, marks: &[Mark]) {
        let _ = write!(
            s,
            "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {W} {H}' width='{W}' height='{H}' role='img' font-size='12'>"
        );
        for t in ticks(self.y.0, self.y.1, 5) {
            let y = self.py(t);
            let _ = write!(
                s,
                "<line x1='{ML}' x2='{}' y1='{y:.1}' y2='{y:.1}' stroke='#e4e4e4'/>\
                 <text x='{}' y='{:.1}' text-anchor='end'>{}</text>",
                W - MR,
                ML - 6.0,
                y + 4.0,
                label(t)
            );
        }
        for t in ticks(self.x.0, self.x.1, 10) {
            let x = self.px(t);
            let _ = write!(
                s,
                "<line x1='{x:.1}' x2='{x:.1}' y1='{}' y2='{}' stroke='#999'/>\
                 <text x='{x:.1}' y='{}' text-anchor='middle'>{}</text>",
                H - MB,
                H - MB + 5.0,
                H - MB + 18.0,
                label(t)
            );
        }
        let _ = write!(
            s,
            "<line x1='{ML}' x2='{right}' y1='{bottom}' y2='{bottom}' stroke='#333'/>\
             <line x1='{ML}' x2='{ML}' y1='{MT}' y2='{bottom}' stroke='#333'/>\
             <text x='{center}' y='{below}' text-anchor='middle'>{xt}</text>\
             <text transform='translate(14 {middle}) rotate(-90)' text-anchor='middle'>{yt}</text>",
            right = W - MR,
            bottom = H - MB,
            center = (ML + W - MR) / 2.0,
            below = H - 6.0,
            xt = esc(x_title),
            middle = (MT + H - MB) / 2.0,
            yt = esc(y_title)
        );
        // Each marker's label on its own line, so close markers do not overlap.
        for (i, m) in marks.iter().enumerate().filter(|(_, m)| m.t >= self.x.0 && m.t <= self.x.1) {
            let x = self.px(m.t);
            // The label on the side with room for it.
            let (anchor, dx) = if x > W - MR - 90.0 { ("end", -4.0) } else { ("start", 4.0) };
            let _ = write!(
                s,
                "<line x1='{x:.1}' x2='{x:.1}' y1='{MT}' y2='{}' stroke='#000' stroke-dasharray='4 3'/>\
                 <text x='{:.1}' y='{}' text-anchor='{anchor}' font-size='11'>{}</text>",
                H - MB,
                x + dx,
                MT + 11.0 + 13.0 * i as f64,
                m.text
            );
        }
    }
}

/// A line chart over time (or any x), with its legend.
fn lines_chart(
    title: &str,
    x_title: &str,
    y_title: &str,
    lines: &[Line],
    marks: &[Mark],
    x: (f64, f64),
) -> String {
    let ymax = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0f64, f64::max);
    let top = ticks(0.0, ymax.max(1e-9) * 1.05, 5).last().copied().unwrap_or(1.0).max(ymax);
    let f = Frame { x, y: (0.0, if top > 0.0 { top } else { 1.0 }) };
    let mut s = format!("<h3>{}</h3>", esc(title));
    f.open(&mut s, x_title, y_title, marks);
    for l in lines {
        let pts: Vec<String> = l
            .points
            .iter()
            .filter(|p| p.0 >= x.0 && p.0 <= x.1)
            .map(|&(a, b)| format!("{:.1},{:.1}", f.px(a), f.py(b)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill='none' stroke-width='2' stroke='{}'{} points='{}'/>",
            l.color,
            if l.dashed { " stroke-dasharray='6 3'" } else { "" },
            pts.join(" ")
        );
    }
    s.push_str("</svg>");
    legend(&mut s, lines.iter().map(|l| (l.name.as_str(), l.color, l.dashed)));
    s
}

/// The legend: a swatch and the name of each series, wrapping as the page is wide.
fn legend<'a>(s: &mut String, items: impl Iterator<Item = (&'a str, &'static str, bool)>) {
    s.push_str("<ul class='legend'>");
    for (name, color, dashed) in items {
        let _ = write!(
            s,
            "<li><span class='sw' style='background:{color}{}'></span>{}</li>",
            if dashed {
                ";background-image:repeating-linear-gradient(90deg,#fff 0 3px,transparent 3px 8px)"
            } else {
                ""
            },
            esc(name)
        );
    }
    s.push_str("</ul>");
}

/// Answers per second by code, stacked, on the time axis.
fn answers_chart(r: &Report, marks: &[Mark], x: (f64, f64)) -> String {
    // The 250 ms slots, summed per second of the burst.
    let mut per_sec: Vec<BTreeMap<&str, u64>> = Vec::new();
    for (i, slot) in r.timeline.iter().enumerate() {
        let sec = i / 4;
        if per_sec.len() <= sec {
            per_sec.resize(sec + 1, BTreeMap::new());
        }
        for (c, n) in slot {
            *per_sec[sec].entry(c.as_str()).or_default() += n;
        }
    }
    // Codes largest first at the bottom.
    let mut codes: Vec<(&str, u64)> = Vec::new();
    for m in &per_sec {
        for (c, n) in m {
            match codes.iter_mut().find(|(k, _)| k == c) {
                Some(e) => e.1 += n,
                None => codes.push((c, *n)),
            }
        }
    }
    codes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let peak = per_sec.iter().map(|m| m.values().sum::<u64>()).max().unwrap_or(1).max(1) as f64;
    let top = ticks(0.0, peak * 1.05, 5).last().copied().unwrap_or(peak).max(peak);
    let f = Frame { x, y: (0.0, top) };
    let mut s = String::from("<h3>Answers per second, by answer code (stacked)</h3>");
    f.open(&mut s, "seconds from the window's opening", "answers / s", marks);
    for (i, m) in per_sec.iter().enumerate() {
        let t0 = r.burst_start_secs + i as f64;
        let (x0, x1) = (f.px(t0), f.px((t0 + 1.0).min(x.1)));
        let mut acc = 0.0;
        for (c, _) in &codes {
            let n = m.get(c).copied().unwrap_or(0) as f64;
            if n == 0.0 {
                continue;
            }
            let (ya, yb) = (f.py(acc), f.py(acc + n));
            let _ = write!(
                s,
                "<rect x='{x0:.1}' y='{yb:.1}' width='{:.1}' height='{:.1}' fill='{}'><title>{} {} at {:.0} s</title></rect>",
                (x1 - x0 - 1.0).max(1.0),
                (ya - yb).max(0.5),
                code_color(c),
                esc(c),
                n,
                t0
            );
            acc += n;
        }
    }
    s.push_str("</svg>");
    legend(&mut s, codes.iter().map(|(c, _)| (*c, code_color(c), false)));
    s
}

/// Differences per second of a cumulative series of the samples.
fn rate(r: &Report, key: &str) -> Vec<(f64, f64)> {
    r.samples
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0].series.get(key)?, w[1].series.get(key)?);
            let dt = w[1].t - w[0].t;
            (dt > 0.0).then(|| (w[1].t, ((b - a) / dt).max(0.0)))
        })
        .collect()
}

fn gauge(r: &Report, key: &str) -> Vec<(f64, f64)> {
    r.samples.iter().filter_map(|s| s.series.get(key).map(|v| (s.t, *v))).collect()
}

/// The page.
pub fn html(r: &Report) -> String {
    let mut s = String::new();
    let verdict = if r.passed() { "PASS" } else { "FAIL" };
    let c = &r.checks;
    let _ = write!(
        s,
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content='width=device-width, initial-scale=1'>\
         <title>Flash sale report: {verdict}</title>\
         <style>body{{font:14px/1.4 system-ui,sans-serif;max-width:940px;margin:1.5em auto;padding:0 12px;color:#1b1b1b}}\
         .ok{{color:#117733}}.bad{{color:#b3261e}}h2{{margin-top:1.6em;border-bottom:1px solid #ddd}}h3{{margin:1.2em 0 .2em;font-size:15px}}\
         svg{{max-width:100%;height:auto;display:block}}table{{border-collapse:collapse}}td,th{{padding:2px 10px;text-align:left;vertical-align:top}}\
         td.n,th.n{{text-align:right;font-variant-numeric:tabular-nums}}.legend{{list-style:none;padding:0;margin:.3em 0 0 70px;display:flex;flex-wrap:wrap;gap:.2em 1.2em}}\
         .sw{{display:inline-block;width:14px;height:10px;margin-right:5px;border:1px solid #0003;vertical-align:baseline}}\
         .cards{{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:8px}}.card{{border:1px solid #ddd;border-radius:6px;padding:6px 10px}}\
         .card b{{display:block;font-size:20px}}</style>\
         <h1>Flash sale report: <span class={}>{verdict}</span></h1>",
        if r.passed() { "ok" } else { "bad" }
    );
    let sold_out = r.sold_out_secs.map_or("not sold out".to_string(), |t| format!("{t:.2} s"));
    let cards = [
        ("stock", format!("{}", c.total_stock)),
        ("sold (database)", format!("{}", c.db_sold)),
        ("window open → sold out", sold_out),
        ("order attempts", format!("{}", r.attempts)),
        ("requests / s at the gateway", format!("{:.0}", r.requests_per_sec)),
        ("sell-through (units / s)", r.sell_through_per_sec.map_or("-".into(), |v| format!("{v:.0}"))),
        ("TRY_LATER share of requests", format!("{:.1} %", r.try_later_share * 100.0)),
        ("undersold", crate::undersell::shown(r.undersell)),
        ("users", format!("{}", r.users)),
        ("queued → settled", format!("{:.2} s", r.drain_secs)),
        (
            "invariants",
            format!("{} of {} hold", r.verdicts.iter().filter(|v| v.ok).count(), r.verdicts.len()),
        ),
    ];
    s.push_str("<div class=cards>");
    for (k, v) in cards {
        let _ = write!(s, "<div class=card>{}<b>{}</b></div>", esc(k), esc(&v));
    }
    s.push_str("</div>");

    // The story, on one time axis.
    let end_burst = r.burst_start_secs + r.burst_secs;
    let first = r.samples.first().map_or(0.0, |x| x.t).min(0.0);
    let last = r.samples.last().map_or(end_burst, |x| x.t).max(end_burst);
    let x = (first, last.max(first + 1.0));
    let mut marks = vec![Mark { t: 0.0, text: "open" }, Mark { t: r.burst_start_secs, text: "burst" }];
    if let Some(t) = r.sold_out_secs {
        marks.push(Mark { t, text: "sold out" });
    }
    let xt = "seconds from the window's opening";
    let _ = write!(
        s,
        "<h2>The sale, second by second</h2><p>Time runs from the window's opening (by the gateway's clock). The crowd took its \
         campaign tokens first (captcha, proof of work, token: {:.2} s for {} accounts), then sent its orders at once (\"burst\"). \
         Server series are sampled every 250 ms from Redis and each process's <code>/metrics</code>.</p>",
        r.token_secs, r.users
    );
    let stock: Vec<(f64, f64)> =
        r.samples.iter().filter_map(|x| x.stock_left.map(|v| (x.t, v as f64))).collect();
    s.push_str(&lines_chart(
        "Stock left in Redis and orders written to PostgreSQL",
        xt,
        "units",
        &[
            Line { name: "stock left (Redis)".into(), color: "#0072B2", points: stock, dashed: false },
            Line {
                name: "orders written (order writer, cumulative)".into(),
                color: "#D55E00",
                points: gauge(r, "orders_written"),
                dashed: true,
            },
        ],
        &marks,
        x,
    ));
    s.push_str(&answers_chart(r, &marks, x));
    let p50: Vec<(f64, f64)> = r
        .latency_per_sec
        .iter()
        .enumerate()
        .map(|(i, l)| (r.burst_start_secs + i as f64 + 0.5, l.0))
        .collect();
    let p99: Vec<(f64, f64)> = r
        .latency_per_sec
        .iter()
        .enumerate()
        .map(|(i, l)| (r.burst_start_secs + i as f64 + 0.5, l.1))
        .collect();
    s.push_str(&lines_chart(
        "Order latency at the client, p50 and p99 per second (every answer)",
        xt,
        "ms",
        &[
            Line { name: "p50".into(), color: "#0072B2", points: p50, dashed: false },
            Line { name: "p99".into(), color: "#D55E00", points: p99, dashed: true },
        ],
        &marks,
        x,
    ));
    s.push_str(&lines_chart(
        "Reservation calls to Redis per second (reserve.lua, every gateway)",
        xt,
        "calls / s",
        &[Line {
            name: "reserve.lua calls / s".into(),
            color: "#117733",
            points: rate(r, "reserve_calls"),
            dashed: false,
        }],
        &marks,
        x,
    ));
    s.push_str(&lines_chart(
        "Kafka backlog: records on the topic not yet consumed, and records waiting in the gateway",
        xt,
        "records",
        &[
            Line {
                name: "topic lag (order writer)".into(),
                color: "#882255",
                points: gauge(r, "writer_lag"),
                dashed: false,
            },
            Line {
                name: "gateway's queue to Kafka".into(),
                color: "#44AA99",
                points: gauge(r, "gateway_queue"),
                dashed: true,
            },
        ],
        &marks,
        x,
    ));
    let shop: Vec<(f64, f64)> = r
        .samples
        .windows(2)
        .filter_map(|w| {
            let n = w[1].series.get("shop_count")? - w[0].series.get("shop_count")?;
            let sum = w[1].series.get("shop_sum")? - w[0].series.get("shop_sum")?;
            (n > 0.0).then(|| (w[1].t, sum / n * 1000.0))
        })
        .collect();
    if shop.is_empty() {
        s.push_str("<p>The shop's own routes had no traffic during this sale: no shop latency to show.</p>");
    } else {
        s.push_str(&lines_chart(
            "The shop route's mean latency beside the sale",
            xt,
            "ms",
            &[Line { name: "shop route, mean".into(), color: "#332288", points: shop, dashed: false }],
            &marks,
            x,
        ));
    }

    s.push_str("<h2>Latency by answer</h2>");
    s.push_str(&latency_chart(r));
    s.push_str("<table><tr><th>answer</th><th class=n>count</th><th class=n>p50 ms</th><th class=n>p90</th><th class=n>p99</th><th class=n>p99.9</th><th class=n>max</th></tr>");
    for (code, l) in &r.latency_ms {
        let _ = write!(
            s,
            "<tr><td><span class=sw style='background:{}'></span>{}</td><td class=n>{}</td><td class=n>{:.2}</td><td class=n>{:.2}</td><td class=n>{:.2}</td><td class=n>{:.2}</td><td class=n>{:.2}</td></tr>",
            code_color(code),
            esc(code),
            l.count,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max
        );
    }
    s.push_str("</table>");

    s.push_str("<h2>Invariants</h2><table>");
    for v in &r.verdicts {
        let _ = write!(
            s,
            "<tr><td class={}><b>{}</b></td><td>{}</td><td>{}</td></tr>",
            if v.ok { "ok" } else { "bad" },
            if v.ok { "PASS" } else { "FAIL" },
            esc(v.name),
            esc(&v.detail)
        );
    }
    s.push_str("</table><h2>Answers by kind of request</h2><table>");
    for (kind, m) in &r.answers {
        let list: Vec<String> = m.iter().map(|(c, n)| format!("{} {n}", esc(c))).collect();
        let _ = write!(s, "<tr><td>{}</td><td>{}</td></tr>", esc(kind), list.join(", "));
    }
    let _ = write!(
        s,
        "</table><p>After the burst: results {}; payments {}; orders {}; resale wave {} queued, {}.</p>",
        esc(&format!("{:?}", r.results)),
        esc(&format!("{:?}", r.payments)),
        esc(&format!("{:?}", c.orders)),
        r.resale_queued,
        esc(&format!("{:?}", r.resale_results))
    );
    s
}

/// The latency distribution of each answer code: x the percentile (0 to 99.99, log of the
/// nines), y milliseconds (log).
fn latency_chart(r: &Report) -> String {
    let nines = |q: f64| (-(1.0 - q).max(1e-4).log10()).min(4.0);
    let max_ms = r.latency_ms.values().map(|l| l.max).fold(1.0f64, f64::max);
    let top = max_ms.log10().ceil().max(1.0);
    // A little room right of p99.99 for its label.
    let f = Frame { x: (0.0, 4.15), y: (-1.0, top) };
    let mut s = String::from("<h3>Latency distribution by answer (log scales)</h3>");
    let _ = write!(
        s,
        "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {W} {H}' width='{W}' height='{H}' role='img' font-size='12'>"
    );
    for (i, lbl) in ["p0", "p90", "p99", "p99.9", "p99.99"].iter().enumerate() {
        let x = f.px(i as f64);
        let _ = write!(
            s,
            "<line x1='{x:.1}' x2='{x:.1}' y1='{MT}' y2='{}' stroke='#e4e4e4'/><text x='{x:.1}' y='{}' text-anchor='middle'>{lbl}</text>",
            H - MB,
            H - MB + 18.0
        );
    }
    let mut d = -1.0;
    while d <= top {
        let y = f.py(d);
        let _ = write!(
            s,
            "<line x1='{ML}' x2='{}' y1='{y:.1}' y2='{y:.1}' stroke='#e4e4e4'/><text x='{}' y='{:.1}' text-anchor='end'>{}</text>",
            W - MR,
            ML - 6.0,
            y + 4.0,
            label(10f64.powf(d))
        );
        d += 1.0;
    }
    let _ = write!(
        s,
        "<line x1='{ML}' x2='{right}' y1='{bottom}' y2='{bottom}' stroke='#333'/>\
         <line x1='{ML}' x2='{ML}' y1='{MT}' y2='{bottom}' stroke='#333'/>\
         <text x='{center}' y='{below}' text-anchor='middle'>percentile of the answers with that code</text>\
         <text transform='translate(14 {middle}) rotate(-90)' text-anchor='middle'>ms (log)</text>",
        right = W - MR,
        bottom = H - MB,
        center = (ML + W - MR) / 2.0,
        below = H - 6.0,
        middle = (MT + H - MB) / 2.0
    );
    for (code, l) in &r.latency_ms {
        let pts: Vec<String> = l
            .curve
            .iter()
            .filter(|(q, _)| *q < 1.0)
            .map(|&(q, ms)| format!("{:.1},{:.1}", f.px(nines(q)), f.py(ms.max(0.1).log10())))
            .collect();
        let _ = write!(
            s,
            "<polyline fill='none' stroke-width='2' stroke='{}' points='{}'/>",
            code_color(code),
            pts.join(" ")
        );
    }
    s.push_str("</svg>");
    legend(&mut s, r.latency_ms.keys().map(|c| (c.as_str(), code_color(c), false)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_colour() {
        let mut seen = std::collections::HashSet::new();
        for (code, color) in CODE_COLORS {
            assert!(seen.insert(color), "{code} repeats {color}");
        }
        assert!(seen.insert(QUEUED_AFTER) && seen.insert(OTHER));
        assert_eq!(code_color("QUEUED_AFTER_SERVICE_DEGRADED"), QUEUED_AFTER);
        assert_ne!(code_color("BAD_SIGNATURE"), code_color("SERVICE_DEGRADED"));
        assert_ne!(code_color("BAD_TOKEN"), code_color("SOLD_OUT"));
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(-3.0, 21.0, 10), vec![0.0, 5.0, 10.0, 15.0, 20.0]);
        let t = ticks(0.0, 203_150.0, 5);
        assert_eq!(t.first(), Some(&0.0));
        assert!(t.len() >= 3 && t.len() <= 6, "{t:?}");
        assert_eq!(label(50_000.0), "50k");
        assert_eq!(label(0.5), "0.5");
    }
}

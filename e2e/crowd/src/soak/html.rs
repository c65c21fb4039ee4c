//! The soak's HTML report: the verdict, then one small chart per series (every sample as a grey
//! line, the quiet samples as dots, the fitted line green within its bound, red past it).

use std::fmt::Write;

use super::{fit, Growth, Report, Sample};

const W: f64 = 520.0;
const H: f64 = 120.0;

/// The whole page.
pub fn render(r: &Report) -> String {
    let mut out = String::from(
        "<!doctype html><meta charset=utf-8><title>Soak</title>\
         <style>body{font:14px sans-serif;margin:2em}pre{background:#f4f4f4;padding:1em}\
         .c{display:inline-block;margin:0 1em 1em 0}.c b{display:block}svg{border:1px solid #ddd}</style>",
    );
    let _ = write!(
        out,
        "<h1>Soak: {}</h1><pre>{}</pre><h2>Series (the line is fitted through the quiet samples)</h2>",
        if r.passed() { "PASS" } else { "FAIL" },
        escape(&r.text(true))
    );
    // A series that stayed at 0 throughout (a process that never talks to that peer) has no chart.
    for g in r
        .growth
        .iter()
        .filter(|g| r.samples.iter().any(|s| s.series.get(&g.series).is_some_and(|v| *v != 0.0)))
    {
        out += &chart(g, &r.samples);
    }
    out
}

/// One series' chart.
fn chart(g: &Growth, samples: &[Sample]) -> String {
    let all: Vec<(f64, f64, bool)> =
        samples.iter().filter_map(|s| s.series.get(&g.series).map(|v| (s.t, *v, s.quiet))).collect();
    let t_max = all.iter().map(|p| p.0).fold(1.0, f64::max);
    let v_max = all.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let x = |t: f64| t / t_max * W;
    let y = |v: f64| H - v / v_max * H;
    let line: Vec<String> = all.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1))).collect();
    let quiet: Vec<(f64, f64)> = all.iter().filter(|p| p.2).map(|p| (p.0, p.1)).collect();
    let mut svg =
        format!("<svg width={W} height={H}><polyline fill=none stroke=#999 points=\"{}\"/>", line.join(" "));
    for (t, v) in &quiet {
        let _ = write!(svg, "<circle cx={:.1} cy={:.1} r=2.5 fill=#333/>", x(*t), y(*v));
    }
    if let (Some(a), Some(b)) = (quiet.first(), quiet.last()) {
        let (slope, icpt) = fit(&quiet);
        let colour = if g.ok { "#2a2" } else { "#d22" };
        let _ = write!(
            svg,
            "<line x1={:.1} y1={:.1} x2={:.1} y2={:.1} stroke={colour} stroke-width=2/>",
            x(a.0),
            y(slope * a.0 + icpt),
            x(b.0),
            y(slope * b.0 + icpt)
        );
    }
    format!(
        "<div class=c><b>{} {}: {:.1} to {:.1}, rise {:.1} of {:.1} allowed (max {:.1})</b>{svg}</svg></div>",
        escape(&g.series),
        if g.ok { "ok" } else { "GREW" },
        g.first,
        g.last,
        g.rise,
        g.allowed,
        v_max / 1.1
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{Report, Sample, ShopFigures};

    #[test]
    fn the_page_has_a_chart_per_series_and_says_the_verdict() {
        let samples: Vec<Sample> = (0..6)
            .map(|i| Sample {
                t: i as f64 * 10.0,
                quiet: i % 2 == 1,
                series: BTreeMap::from([
                    ("gateway/fds".to_string(), 50.0),
                    ("gateway/rss_mib".to_string(), 30.0),
                ]),
            })
            .collect();
        let shop = ShopFigures { requests: 10, ..Default::default() };
        let r = Report::new(60.0, samples, &BTreeMap::new(), shop, vec!["PASS sale 1 <ok>".into()]);
        let page = super::render(&r);
        assert!(page.contains("<h1>Soak: PASS</h1>"), "{page}");
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("stroke=#2a2") && page.contains("&lt;ok&gt;"));
    }
}

//! The report as one self-contained HTML page (inline CSS and SVG, no script, nothing fetched):
//! the headline figures, the sale second by second, the answers by code, the stock flow, the
//! payments and closes, the reconciliation's verdict and the audit's flagged groups. The look
//! (fonts, cards, colours of the answer codes) is the demo's report's, `e2e/crowd/src/page.rs`.

use std::fmt::Write;

use super::Sale;
use crate::campaign::audit::Audit;

const W: f64 = 900.0;
const H: f64 = 240.0;
/// Plot margins: left, right, top, bottom.
const ML: f64 = 60.0;
const MR: f64 = 16.0;
const MT: f64 = 14.0;
const MB: f64 = 42.0;

/// The longest sale (seconds) whose quiet seconds are drawn as zeros.
const MAX_DENSE_SECS: i64 = 7200;

/// The audit's flagged groups shown at most (the JSON has them all).
const MAX_GROUPS_SHOWN: usize = 100;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;max-width:940px;margin:1.5em auto;padding:0 12px;color:#1b1b1b}\
.ok{color:#117733}.bad{color:#b3261e}h2{margin-top:1.6em;border-bottom:1px solid #ddd}h3{margin:1.2em 0 .2em;font-size:15px}\
svg{max-width:100%;height:auto;display:block}table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;vertical-align:top}td.k{overflow-wrap:anywhere}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}.legend{list-style:none;padding:0;margin:.3em 0 0 60px;display:flex;flex-wrap:wrap;gap:.2em 1.2em}\
.sw{display:inline-block;width:14px;height:10px;margin-right:5px;border:1px solid #0003;vertical-align:baseline}\
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:8px}.card{border:1px solid #ddd;border-radius:6px;padding:6px 10px}\
.card b{display:block;font-size:20px}pre{background:#f6f6f6;padding:8px;overflow-x:auto}.bar{height:12px;display:inline-block;vertical-align:middle}";

/// The demo report's colours of the answer codes (`e2e/crowd/src/page.rs`), others grey.
fn code_color(code: &str) -> &'static str {
    match code {
        "QUEUED" => "#117733",
        "SOLD_OUT" => "#BBBBBB",
        "LIMIT_REACHED" => "#332288",
        "RATE_LIMITED" => "#DDCC77",
        "SERVICE_DEGRADED" => "#CC6677",
        "BAD_SIGNATURE" => "#882255",
        "BAD_TOKEN" => "#88CCEE",
        "REPLAY" => "#AA4499",
        "STALE_TIMESTAMP" => "#999933",
        "NOT_STARTED" => "#E69F00",
        "TRY_LATER" => "#0072B2",
        "TOKEN_EXPIRED" => "#56B4E9",
        "NOT_ELIGIBLE" => "#D55E00",
        _ => "#555555",
    }
}

/// `s` with HTML's special characters escaped.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// About `n` round ticks covering `lo..=hi`.
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..=n * 2 + 2).map(|i| first + step * i as f64).take_while(|t| *t <= hi + 1e-9).collect()
}

/// A tick's label: whole numbers without decimals.
fn label(t: f64) -> String {
    if (t - t.round()).abs() < 1e-9 {
        format!("{:.0}", t.round())
    } else {
        format!("{t:.1}")
    }
}

/// One series of a line chart.
struct Series<'a> {
    name: &'a str,
    color: &'a str,
    points: Vec<(f64, f64)>,
}

/// A line chart of `series` over x, with its axes, ticks, titles and legend.
fn chart(title: &str, x_title: &str, y_title: &str, series: &[Series<'_>]) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (x0, x1) = if x0 > x1 { (0.0, 1.0) } else { (x0, x1.max(x0 + 1.0)) };
    let ymax = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(1.0f64, f64::max);
    let px = |x: f64| ML + (x - x0) / (x1 - x0) * (W - ML - MR);
    let py = |y: f64| H - MB - y / ymax * (H - MT - MB);
    let mut s = format!(
        "<h3>{}</h3><svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {W} {H}' width='{W}' height='{H}' role='img' font-size='12'>",
        esc(title)
    );
    for t in ticks(0.0, ymax, 5) {
        let _ = write!(
            s,
            "<line x1='{ML}' x2='{}' y1='{y:.1}' y2='{y:.1}' stroke='#e4e4e4'/><text x='{}' y='{:.1}' text-anchor='end'>{}</text>",
            W - MR,
            ML - 6.0,
            py(t) + 4.0,
            label(t),
            y = py(t)
        );
    }
    for t in ticks(x0, x1, 10) {
        let _ = write!(
            s,
            "<text x='{:.1}' y='{}' text-anchor='middle'>{}</text>",
            px(t),
            H - MB + 18.0,
            label(t)
        );
    }
    let _ = write!(
        s,
        "<line x1='{ML}' x2='{}' y1='{b}' y2='{b}' stroke='#333'/><line x1='{ML}' x2='{ML}' y1='{MT}' y2='{b}' stroke='#333'/>\
         <text x='{}' y='{}' text-anchor='middle'>{}</text><text transform='translate(14 {}) rotate(-90)' text-anchor='middle'>{}</text>",
        W - MR,
        (ML + W - MR) / 2.0,
        H - 6.0,
        esc(x_title),
        (MT + H - MB) / 2.0,
        esc(y_title),
        b = H - MB
    );
    for l in series {
        let pts: Vec<String> = l.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ = write!(
            s,
            "<polyline fill='none' stroke-width='2' stroke='{}' points='{}'/>",
            l.color,
            pts.join(" ")
        );
    }
    s.push_str("</svg><ul class='legend'>");
    for l in series {
        let _ = write!(s, "<li><span class='sw' style='background:{}'></span>{}</li>", l.color, esc(l.name));
    }
    s.push_str("</ul>");
    s
}

/// A table of (label, value) rows, values right-aligned.
fn table(rows: &[(&str, String)]) -> String {
    let mut s = String::from("<table>");
    for (k, v) in rows {
        let _ = write!(s, "<tr><td>{}</td><td class=n>{}</td></tr>", esc(k), esc(v));
    }
    s.push_str("</table>");
    s
}

/// The headline cards.
fn cards(r: &Sale) -> String {
    let left: i64 = r.stock.left.iter().sum();
    let cards = [
        ("stock", r.campaign.total_stock.to_string()),
        ("ordered (units)", r.orders.units.to_string()),
        ("paid (units)", r.orders.paid.1.to_string()),
        ("closed unpaid (units)", r.orders.closed.1.to_string()),
        ("sold (database)", r.campaign.sold.to_string()),
        ("left in Redis", left.to_string()),
        ("buyers", r.orders.buyers.to_string()),
        ("money taken", format!("{:.2}", r.orders.paid_cents as f64 / 100.0)),
        ("reconcile", if r.reconcile.holds() { "holds" } else { "DIFFERS" }.to_string()),
        ("audit: flagged groups", r.audit.flagged().count().to_string()),
    ];
    let mut s = String::from("<div class=cards>");
    for (k, v) in cards {
        let _ = write!(s, "<div class=card>{}<b>{}</b></div>", esc(k), esc(&v));
    }
    s.push_str("</div>");
    s
}

/// The seconds of `timeline` with the quiet ones between them as zeros (a line drawn across a
/// gap would show orders that were not there), up to [`MAX_DENSE_SECS`] seconds; a longer
/// sale's seconds as they are.
fn dense(timeline: &[super::Second]) -> Vec<super::Second> {
    let (Some(first), Some(last)) = (timeline.first(), timeline.last()) else { return Vec::new() };
    if last.t - first.t > MAX_DENSE_SECS {
        return timeline.to_vec();
    }
    let mut out: Vec<super::Second> =
        (first.t..=last.t).map(|t| super::Second { t, ..Default::default() }).collect();
    for s in timeline {
        out[(s.t - first.t) as usize] = s.clone();
    }
    out
}

/// Orders, payments and closes per second.
fn timeline(r: &Sale) -> String {
    if r.timeline.is_empty() {
        return "<h2>The sale, second by second</h2><p>No order was written: nothing to draw.</p>".into();
    }
    let seconds = dense(&r.timeline);
    let line = |f: fn(&super::Second) -> i64| seconds.iter().map(|s| (s.t as f64, f(s) as f64)).collect();
    let series = [
        Series { name: "orders (by reservation time)", color: "#117733", points: line(|s| s.ordered) },
        Series { name: "payments", color: "#0072B2", points: line(|s| s.paid) },
        Series { name: "closes (unpaid in time)", color: "#D55E00", points: line(|s| s.closed) },
    ];
    format!(
        "<h2>The sale, second by second</h2><p>Seconds from the window's opening ({}), from the orders' own times in PostgreSQL.</p>{}",
        esc(&r.campaign.starts_at),
        chart("Orders, payments and closes per second", "seconds from the window's opening", "per second", &series)
    )
}

/// The gateways' answers by code, as bars.
fn answers(r: &Sale) -> String {
    let mut s = String::from("<h2>Answers by code</h2>");
    let Some(a) = &r.answers else {
        s.push_str("<p>No gateway metrics were read (<code>--gateway-metrics URL</code>).</p>");
        return s;
    };
    let total: u64 = a.values().sum();
    let _ = write!(
        s,
        "<p>{total} answers of the sale's endpoints (captcha, token, order), from the gateways' <code>/metrics</code> \
         (<code>seckill_gateway_order_answers_total</code>).</p><table>"
    );
    let mut rows: Vec<_> = a.iter().filter(|(_, n)| **n > 0).collect();
    rows.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    let max = rows.first().map_or(1, |r| *r.1).max(1);
    for (code, n) in rows {
        let width = (*n as f64 / max as f64 * 500.0).max(1.0);
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=n>{n}</td><td><span class=bar style='width:{width:.0}px;background:{}'></span></td></tr>",
            esc(code),
            code_color(code)
        );
    }
    s.push_str("</table>");
    s
}

/// Where the stock went.
fn stock_flow(r: &Sale) -> String {
    let o = &r.orders;
    let left: i64 = r.stock.left.iter().sum();
    let queued = r.stock.held - o.pending.1 - o.paid.1;
    let stat = |k: &str| r.stock.stats.get(k).copied().unwrap_or(0);
    let parts = [
        ("paid", o.paid.1, "#117733"),
        ("ordered, waiting for payment", o.pending.1, "#E69F00"),
        ("reserved, no order yet", queued.max(0), "#AA4499"),
        ("set aside", stat("aside_qty"), "#882255"),
        ("left in Redis", left, "#BBBBBB"),
    ];
    let total = r.campaign.total_stock.max(1) as f64;
    let mut s = String::from("<h2>Stock flow</h2><p>Where the campaign's stock is now, of its total:</p><div style='width:100%;max-width:900px;display:flex;border:1px solid #999'>");
    for (name, n, color) in parts.iter().filter(|p| p.1 > 0) {
        let _ = write!(
            s,
            "<span title='{}: {n}' style='width:{:.2}%;background:{color};height:22px'></span>",
            esc(name),
            *n as f64 / total * 100.0
        );
    }
    s.push_str("</div><ul class='legend' style='margin-left:0'>");
    for (name, n, color) in parts {
        let _ = write!(s, "<li><span class='sw' style='background:{color}'></span>{} {n}</li>", esc(name));
    }
    s.push_str("</ul>");
    let buckets: Vec<String> = r.stock.left.iter().map(i64::to_string).collect();
    s.push_str(&table(&[
        ("total stock (PostgreSQL)", r.campaign.total_stock.to_string()),
        ("ordered, every order ever written (units)", o.units.to_string()),
        ("closed unpaid, given back to the sale (units)", o.closed.1.to_string()),
        ("live orders: waiting + paid (units)", (o.pending.1 + o.paid.1).to_string()),
        ("sold (campaigns.sold)", r.campaign.sold.to_string()),
        ("held by buyers in Redis (Σ bought)", r.stock.held.to_string()),
        ("left in Redis, by bucket", buckets.join(" + ")),
        ("released in Redis (units)", stat("released_qty").to_string()),
        ("still in the outbox (records)", r.stock.outbox.to_string()),
    ]));
    s
}

/// Payments, closes, refusals and order events.
fn payments(r: &Sale) -> String {
    let o = &r.orders;
    let pay = o.pay_secs_p50_p90.map_or("-".to_string(), |(a, b)| format!("{a:.1} s / {b:.1} s"));
    let mut rows = vec![
        ("orders", o.orders.to_string()),
        ("paid orders", o.paid.0.to_string()),
        ("waiting for payment", o.pending.0.to_string()),
        ("closed unpaid", o.closed.0.to_string()),
        ("closed, stock back in Redis", o.closed_released.to_string()),
        ("money taken", format!("{:.2}", o.paid_cents as f64 / 100.0)),
        ("order → payment, median / p90", pay),
    ];
    for (status, n) in &o.refused {
        rows.push(("refused by PostgreSQL", format!("{n} {status}")));
    }
    let events: Vec<String> =
        o.events.iter().map(|(k, (p, w))| format!("{k} {p} produced, {w} waiting")).collect();
    rows.push(("order events", if events.is_empty() { "none".into() } else { events.join("; ") }));
    format!("<h2>Payments and closes</h2>{}", table(&rows))
}

/// The reconciliation's verdict and its equation.
fn reconcile(r: &Sale) -> String {
    let v = &r.reconcile;
    let word = |ok: bool| if ok { "<span class=ok>holds</span>" } else { "<span class=bad>DIFFERS</span>" };
    let diffs: Vec<String> = v.differences.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "<h2>Reconciliation: {}</h2><p>Redis {}, PostgreSQL {}, across the stores {}; differences: {}.</p><pre>{}</pre>",
        word(v.holds()),
        word(v.redis),
        word(v.postgres),
        word(v.across),
        if diffs.is_empty() { "none".to_string() } else { esc(&diffs.join(", ")) },
        esc(&v.text)
    )
}

/// The audit: the crowd, then the flagged groups.
fn audit(a: &Audit) -> String {
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.2} %", r * 100.0));
    let opt = |n: Option<u64>| n.map_or("-".to_string(), |n| n.to_string());
    let mut s = format!(
        "<h2>Audit</h2><p>{} winners ({} units), {} attempts in the access logs read, success rate {}; {} orders without an origin.</p>",
        a.crowd.winners,
        a.crowd.units,
        opt(a.crowd.attempts),
        pct(a.crowd.success_rate),
        a.crowd.without_origin
    );
    let flagged: Vec<_> = a.flagged().collect();
    if flagged.is_empty() {
        s.push_str("<p class=ok>No group is flagged.</p>");
        return s;
    }
    let _ = write!(
        s,
        "<p class=bad>{} groups flagged for review{}.</p><table><tr><th>group</th><th>key</th><th class=n>winners</th>\
         <th class=n>attempts</th><th class=n>forged</th><th class=n>rate</th><th>why</th></tr>",
        flagged.len(),
        if flagged.len() > MAX_GROUPS_SHOWN { format!(" (the first {MAX_GROUPS_SHOWN} shown)") } else { String::new() }
    );
    for g in flagged.iter().take(MAX_GROUPS_SHOWN) {
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=k>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
            g.kind.name(),
            esc(&g.key),
            g.winners,
            opt(g.attempts),
            g.forged,
            pct(g.success_rate),
            esc(&g.flags.join("; "))
        );
    }
    s.push_str("</table>");
    s
}

/// The whole page.
pub fn page(r: &Sale) -> String {
    let c = &r.campaign;
    let verdict = if r.reconcile.holds() { ("ok", "reconciled") } else { ("bad", "DIFFERS") };
    let mut s = format!(
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content='width=device-width, initial-scale=1'>\
         <title>Sale report {id}: {v}</title><style>{STYLE}</style>\
         <h1>Sale report {id}: <span class={k}>{v}</span></h1>\
         <p>Made {made} from what the campaign left in PostgreSQL, Redis, the reconciliation, the audit{metrics}. \
         SKU {sku}, window {from} to {to}, limit {limit} per buyer, price {price:.2}, state {state}, {buckets} bucket(s).</p>",
        id = esc(&c.id),
        v = verdict.1,
        k = verdict.0,
        made = esc(&r.made_at),
        metrics = if r.answers.is_some() { " and the gateways' metrics" } else { "" },
        sku = esc(&c.sku),
        from = esc(&c.starts_at),
        to = esc(&c.ends_at),
        limit = c.per_user_limit,
        price = c.price_cents as f64 / 100.0,
        state = esc(&c.state),
        buckets = c.buckets
    );
    for part in [cards(r), timeline(r), answers(r), stock_flow(r), payments(r), reconcile(r), audit(&r.audit)]
    {
        s.push_str(&part);
    }
    s.push_str("</html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(-3.0, 12.0, 3), [0.0, 5.0, 10.0]);
    }

    #[test]
    fn quiet_seconds_are_zeros() {
        let s = |t, ordered| super::super::Second { t, ordered, paid: 0, closed: 0 };
        let d = dense(&[s(3, 5), s(6, 2)]);
        assert_eq!(d.iter().map(|x| (x.t, x.ordered)).collect::<Vec<_>>(), [(3, 5), (4, 0), (5, 0), (6, 2)]);
        assert!(dense(&[]).is_empty());
        assert_eq!(dense(&[s(0, 1), s(MAX_DENSE_SECS + 1, 1)]).len(), 2, "a long sale as it is");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
    }
}

//! The self-contained `index.html`: inline CSS, inline SVG charts, links to
//! the PNG/SVG files beside it, no scripts and no network fetches. Every
//! string that came from an input file goes through [`escape_html`].

use crate::charts::{Chart, MAX_CHART_SERIES};
use crate::dataset::Dataset;
use crate::fit::{Join, OneRegime, Reduction, Regimes, SeriesFit};
use crate::predict::{AllReduceAlgorithm, LinkModel, LinkSource, ScaleRow};
use crate::summary::Summary;
use crate::units::{fmt_alpha, fmt_bytes, fmt_gbps_of_cost, fmt_us, sig3};

/// Everything the page shows.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The merged inputs.
    pub dataset: &'a Dataset,
    /// Fits (regime model and α–β baseline) per series and collective.
    pub fits: &'a [SeriesFit],
    /// The one-screen summary.
    pub summary: &'a Summary,
    /// Rendered charts (inlined as SVG; PNG/SVG files are linked by stem).
    pub charts: &'a [Chart],
    /// Per-message link costs behind the scale predictions.
    pub links: &'a [LinkModel],
    /// Scale predictions.
    pub scale: &'a [ScaleRow],
}

/// Escape text for HTML element content and quoted attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root { color-scheme: light; --fg: #1d1d1f; --muted: #5f6368; --line: #d9dce1; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1100px; padding: 0 1rem 3rem; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg); background: #fff; }
header { border-bottom: 2px solid var(--line); margin-bottom: 1rem; }
h1 { font-size: 1.6rem; margin: 1rem 0 .25rem; }
h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.1rem; margin-top: 1.6rem; }
nav a { margin-right: .9rem; white-space: nowrap; }
a { color: var(--accent); }
p.note, figcaption, .muted { color: var(--muted); font-size: .92rem; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: .5rem 0 1rem; border: 1px solid var(--line); border-radius: 4px; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; font-variant-numeric: tabular-nums; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { background: #f4f5f7; position: sticky; top: 0; }
td.text, th.text { text-align: left; }
td:first-child { position: sticky; left: 0; background: #fff; }
td.win { font-weight: 700; color: #0b6b0b; }
td.bad, p.bad { color: #b00020; font-weight: 700; }
figure.chart { margin: 1rem 0 1.6rem; }
figure.chart svg, figure.chart img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
code { font-size: .9em; background: #f4f5f7; padding: 0 .2em; border-radius: 3px; word-break: break-all; }
@media (max-width: 600px) { body { font-size: 15px; padding: 0 .6rem 2rem; } th, td { padding: .25rem .4rem; } }
"#;

/// A text column (left aligned); other columns hold numbers (right aligned).
const T: bool = true;
/// A number column.
const N: bool = false;

/// The most rows one table shows: 100k records once made a 101 MB page.
pub const MAX_TABLE_ROWS: usize = 500;

fn table(head: &[(&str, bool)], rows: &[String]) -> String {
    let mut s = String::from("<div class=\"scroll\"><table><thead><tr>");
    for (h, text) in head {
        let class = if *text { " class=\"text\"" } else { "" };
        s.push_str(&format!("<th{class}>{h}</th>"));
    }
    s.push_str("</tr></thead><tbody>\n");
    for r in rows.iter().take(MAX_TABLE_ROWS) {
        s.push_str(&format!("<tr>{r}</tr>\n"));
    }
    s.push_str("</tbody></table></div>\n");
    if rows.len() > MAX_TABLE_ROWS {
        s.push_str(&format!(
            "<p class=\"note\">Showing the first {MAX_TABLE_ROWS} of {} rows, so the page \
             stays readable; every measurement is in the results file(s).</p>\n",
            rows.len()
        ));
    }
    s
}

fn td(text: &str) -> String {
    format!("<td>{}</td>", escape_html(text))
}

fn td_text(text: &str) -> String {
    format!("<td class=\"text\">{}</td>", escape_html(text))
}

/// `1/b` of every regime, e.g. `cache 7.9 → memory 1.6` (GB/s).
pub(crate) fn bandwidths(m: &Regimes) -> String {
    let one = |k: usize| {
        let r = &m.regimes[k];
        // 1/β when γ was split off, else 1/(β+γ) = 1/b.
        let b = if m.reduction == Reduction::Separated {
            r.beta_us_per_byte
        } else {
            r.cost_us_per_byte()
        };
        let gbps = fmt_gbps_of_cost(b);
        if m.regimes.len() == 1 {
            gbps
        } else {
            format!("{} {gbps}", m.regime_name(k))
        }
    };
    (0..m.regimes.len())
        .map(one)
        .collect::<Vec<_>>()
        .join(" → ")
}

/// The breaks, e.g. `11.3 MiB (cache → memory)`, or `—`.
pub(crate) fn breaks(m: &Regimes) -> String {
    let v: Vec<String> = (1..m.regimes.len())
        .map(|k| {
            format!(
                "{} ({})",
                fmt_bytes(m.regimes[k].from_bytes),
                m.transition(k)
            )
        })
        .collect();
    if v.is_empty() {
        "—".into()
    } else {
        v.join(", ")
    }
}

/// What a reader must know to trust the numbers of one model.
fn notes(m: &Regimes) -> String {
    let mut notes = Vec::new();
    match m.one_regime {
        Some(OneRegime::TooFewSizes { sizes }) => notes.push(format!(
            "one regime: {sizes} size(s), a break needs {}",
            crate::fit::MIN_SIZES_FIRST + crate::fit::MIN_SIZES_AFTER_BREAK
        )),
        Some(OneRegime::Plateau) => {
            notes.push("one regime: too few sizes above the latency plateau for a break".into())
        }
        Some(OneRegime::NoGain) => notes.push("one regime: no break paid for itself".into()),
        None => notes.push(match m.join {
            Join::Continuous => "continuous at the breaks".into(),
            Join::Jump => "piecewise: jumps at the breaks".into(),
        }),
    }
    if let Some(st) = m.step {
        notes.push(format!(
            "latency step between {} and {}: more messages per call above",
            fmt_bytes(st.bracket.0),
            fmt_bytes(st.bracket.1)
        ));
    }
    for k in 1..m.regimes.len() {
        if let Some((lo, hi)) = m.regimes[k].bracket {
            if m.join == Join::Jump {
                notes.push(format!(
                    "break {k} between {} and {}",
                    fmt_bytes(lo),
                    fmt_bytes(hi)
                ));
            }
        }
    }
    match m.reduction {
        Reduction::None => {}
        Reduction::Combined => {
            notes.push("bandwidths are 1/(β+γ): no all_gather to separate the reduction".into())
        }
        Reduction::Unresolved => notes
            .push("bandwidths are 1/(β+γ): all_gather not cheaper per byte, γ unresolved".into()),
        Reduction::Separated => {
            let g: Vec<String> = m
                .regimes
                .iter()
                .map(|r| r.gamma_us_per_byte.map_or("∞".into(), fmt_gbps_of_cost))
                .collect();
            notes.push(format!(
                "bandwidths are 1/β; reduction 1/γ = {} GB/s (from all_gather)",
                g.join(" → ")
            ));
        }
    }
    if m.alpha_pinned {
        notes.push("α pinned at 0 (fit wanted α < 0)".into());
    }
    notes.join("; ")
}

fn fit_cells(f: &SeriesFit) -> String {
    match &f.model {
        Some(m) => [
            td(&fmt_alpha(m)),
            td_text(&bandwidths(m)),
            td_text(&breaks(m)),
            td(&format!("{:.3}", m.r_squared)),
            td(&f
                .fit
                .model()
                .map_or("—".into(), |ab| format!("{:.3}", ab.r_squared))),
            td(&format!("{}/{}", m.sizes, m.points)),
            td_text(&notes(m)),
        ]
        .concat(),
        None => format!(
            "<td colspan=\"6\">—</td>{}",
            td_text(&format!(
                "no fit: {} distinct size(s), need 2",
                match f.fit {
                    crate::fit::Fit::TooFewSizes { sizes } => sizes,
                    crate::fit::Fit::Fitted(m) => m.sizes,
                }
            ))
        ),
    }
}

fn summary_section(p: &Page<'_>) -> String {
    let mut s = String::from("<section id=\"summary\"><h2>Summary</h2>\n");
    s.push_str(&format!(
        "<p>{} record(s) in {} series from {} file(s). Times are per call after combining ranks \
         (see <code>combine</code> in the manifest), median over iterations.</p>\n",
        p.summary.records, p.summary.series, p.summary.files
    ));
    s.push_str("<h3>Fastest series by median time</h3>\n");
    let rows: Vec<String> = p
        .summary
        .best
        .iter()
        .map(|b| {
            let runner = match &b.runner_up {
                Some((name, r)) => format!("{name} ({}× slower)", sig3(*r)),
                None => "—".into(),
            };
            [
                td_text(b.collective.key()),
                td_text(b.range.label()),
                format!("<td class=\"text win\">{}</td>", escape_html(&b.series)),
                td(&format!("{}/{}", b.wins, b.sizes)),
                td_text(&runner),
            ]
            .concat()
        })
        .collect();
    s.push_str(&table(
        &[
            ("collective", T),
            ("sizes", T),
            ("fastest", T),
            ("fastest at", N),
            ("runner-up", T),
        ],
        &rows,
    ));
    s.push_str("<h3>Fitted costs</h3>\n");
    let rows: Vec<String> = p
        .fits
        .iter()
        .map(|f| {
            let (alpha, bw, br, r2) = match &f.model {
                Some(m) => (
                    fmt_alpha(m),
                    bandwidths(m),
                    breaks(m),
                    format!("{:.3}", m.r_squared),
                ),
                None => ("no fit".into(), "—".into(), "—".into(), "—".into()),
            };
            [
                td_text(&f.name),
                td_text(f.collective.key()),
                td(&alpha),
                td_text(&bw),
                td_text(&br),
                td(&r2),
            ]
            .concat()
        })
        .collect();
    s.push_str(&table(
        &[
            ("series", T),
            ("collective", T),
            ("α", N),
            ("bandwidth by regime (GB/s)", T),
            ("breaks", T),
            ("R²", N),
        ],
        &rows,
    ));
    s.push_str("</section>\n");
    s
}

fn inline_svg(chart: &Chart) -> String {
    let label = format!("role=\"img\" aria-label=\"{}\" ", escape_html(&chart.title));
    match chart.svg.find("<svg ") {
        Some(i) => format!("{}<svg {label}{}", &chart.svg[..i], &chart.svg[i + 5..]),
        None => chart.svg.clone(),
    }
}

fn charts_section(p: &Page<'_>) -> String {
    let mut s = String::from("<section id=\"charts\"><h2>Charts</h2>\n");
    s.push_str(
        "<p class=\"note\">Solid lines: our measurements; long dashes: peer (torch) \
         measurements; thin short dashes: the fitted regime model; grey vertical lines: the \
         breaks it found (labelled). Each chart is also next to \
         this page as PNG and SVG. Titles name the world size and the machine (its CPU model \
         and how many cores it has).</p>\n<p class=\"note\"><b>busbw</b> (bus bandwidth, as \
         nccl-tests defines it) = algbw × a factor per collective, where algbw = bytes / time: \
         2(n−1)/n for all_reduce, (n−1)/n for all_gather and reduce_scatter, 1 for broadcast \
         and reduce. It is the rate each rank's link carries in a bandwidth-optimal algorithm, \
         so it can be compared across world sizes and against a link's or memory's speed.</p>\n",
    );
    let failed = &p.summary.charts_not_drawn;
    if !failed.is_empty() {
        // Said first and plainly: a missing chart must not look like a
        // missing measurement. The numbers are all in the tables below.
        let items: Vec<String> = failed
            .iter()
            .map(|f| {
                format!(
                    "<li><code>{}</code>: {}</li>",
                    escape_html(&f.chart),
                    escape_html(&f.reason)
                )
            })
            .collect();
        s.push_str(&format!(
            "<p class=\"bad\">{} chart(s) could not be drawn; their numbers are in the \
             tables below and in the results file:</p>\n<ul>\n{}\n</ul>\n",
            failed.len(),
            items.join("\n")
        ));
    }
    for c in p.dataset.collectives() {
        let n = p.dataset.series_for(c).len();
        if n > MAX_CHART_SERIES {
            s.push_str(&format!(
                "<p class=\"note\"><b>{}: showing {MAX_CHART_SERIES} of {n} series</b> \
                 (the fastest by geometric-mean median time); every series is in the \
                 results file(s).</p>\n",
                c.key()
            ));
        }
    }
    if p.charts.is_empty() && failed.is_empty() {
        s.push_str("<p>No chart: no collective has a positive size and time.</p>\n");
    }
    let mut current = None;
    for c in p.charts {
        if current != Some(c.collective) {
            let heading = c.collective.map_or("measurements", |c| c.key());
            s.push_str(&format!("<h3>{heading}</h3>\n"));
            current = Some(c.collective);
        }
        // Stems are built from fixed names (`[a-z_-]`), safe in ids and URLs.
        s.push_str(&format!(
            "<figure class=\"chart\" id=\"chart-{stem}\">\n<a href=\"{stem}.png\" title=\"full-size PNG\">{svg}</a>\n<figcaption>{title} — \
             <a href=\"{stem}.png\">PNG</a> · <a href=\"{stem}.svg\">SVG</a></figcaption></figure>\n",
            stem = c.stem,
            svg = inline_svg(c),
            title = escape_html(&c.title)
        ));
    }
    s.push_str("</section>\n");
    s
}

fn model_section(p: &Page<'_>) -> String {
    let mut s = String::from("<section id=\"model\"><h2>Cost model</h2>\n");
    s.push_str(
        "<p>Per series and collective, <code>t(S) = α + S·f·b<sub>k</sub></code> with \
         <code>f</code> the collective's bus factor (all_reduce 2(n−1)/n, all_gather (n−1)/n, \
         broadcast 1, …; 1 where it would be 0), so 1/b is comparable with busbw, and \
         <code>b<sub>k</sub> = β<sub>k</sub> + γ<sub>k</sub></code> the time per bus byte of \
         regime <code>k</code>: moving (β) plus, for a reducing collective, reducing (γ; Thakur, \
         Rabenseifner &amp; Gropp 2005). Regimes are size ranges with their own bandwidth — \
         typically buffers in cache below a break, streamed from memory above it, and for \
         some libraries a cheaper protocol for large messages. The fit finds the breaks: it \
         tries every placement between measured sizes (above the latency plateau, at least 3 \
         sizes in the first regime and 2 in each later one), fits α and every b ≥ 0 by least \
         squares weighted by 1/t² (relative error, so the small sizes set α), and keeps a \
         break only when the Bayesian information criterion says it pays for its two extra \
         parameters. <em>Continuous</em>: bytes up to a break cost the lower regime's b, bytes \
         beyond it the upper one's; <em>piecewise</em>: every byte of a message above a break \
         costs the upper b, so the time jumps there, and the data place the break only \
         between two measured sizes. γ is separated from β where the same series also \
         measured all_gather (same bus bytes, no reduction: γ = b(all_reduce) − \
         b(all_gather)); otherwise the bandwidth shown is 1/(β+γ). α may rise once on the \
         latency plateau (<em>latency step</em>, shown as <code>α → α′ from S</code>): α is a \
         cost per message, and a segmented algorithm sends more messages once a buffer fills \
         more of its segments (Gloo's ring cuts every buffer into 2·n segments of whole \
         elements, so at 2 ranks 1–2 floats leave some empty); it is kept, like a break, \
         only when it pays for its two parameters.</p>\n<p><b>R²</b> is the \
         weighted coefficient of determination on relative error: 1 − Σ((t − model)/t)² / \
         Σ((t − t̄)/t)², with t̄ the 1/t²-weighted mean time — the scale the fit minimises; 1 \
         is a perfect fit. <b>R² α–β</b> is the same for the one-bandwidth model \
         <code>t = α + β·S·f</code> (Hockney), for comparison.</p>\n",
    );
    let rows: Vec<String> = p
        .fits
        .iter()
        .map(|f| {
            format!(
                "{}{}{}{}",
                td_text(&f.name),
                td_text(f.collective.key()),
                td(&f.world.to_string()),
                fit_cells(f)
            )
        })
        .collect();
    s.push_str(&table(
        &[
            ("series", T),
            ("collective", T),
            ("ranks", N),
            ("α", N),
            ("bandwidth by regime (GB/s)", T),
            ("breaks", T),
            ("R²", N),
            ("R² α–β", N),
            ("sizes/points", N),
            ("note", T),
        ],
        &rows,
    ));
    s.push_str("</section>\n");
    s
}

fn scale_section(p: &Page<'_>) -> String {
    let mut s = String::from("<section id=\"scale\"><h2>Scale predictions: all_reduce</h2>\n");
    s.push_str(
        "<p>What each series' link costs imply on more ranks, for three algorithms: ring \
         <code>2(p−1)·α + 2(p−1)/p·S·β</code>, recursive halving-doubling \
         <code>2·log2(p)·α + 2(p−1)/p·S·β</code> and binomial-tree reduce + broadcast \
         <code>2·log2(p)·(α + S·β)</code>. α here is the cost of one message: from the \
         send_recv model when there is one, otherwise the all_reduce model's α (after any \
         latency step: the α large buffers pay) divided by the \
         2(n−1) steps of a ring on the n measured ranks. β is the cost per byte of the regime \
         each rank's buffer S falls into, for every algorithm: the regimes are where the \
         measured buffers stopped fitting in cache, and each rank reads and writes its whole \
         buffer whatever the size of the chunks it sends (a ring's S/p chunks of a buffer \
         past the cache still come from memory). From all_reduce, β includes its reduction \
         cost γ; from send_recv it has none. The regime column names the one used. A model, \
         not a measurement: contention for shared caches and memory, topology and \
         congestion are not in it, so these are lower bounds.</p>\n",
    );
    if p.links.is_empty() {
        s.push_str("<p>No prediction: no series has a send_recv or all_reduce fit.</p>\n");
        s.push_str("</section>\n");
        return s;
    }
    let rows: Vec<String> = p
        .links
        .iter()
        .map(|l| {
            let source = match l.source {
                LinkSource::SendRecv => "send_recv fit".to_string(),
                LinkSource::AllReduce { world } => {
                    format!(
                        "all_reduce fit on {world} ranks, α / {}",
                        2 * world.max(2) - 2
                    )
                }
            };
            let bw: Vec<String> = l
                .regimes
                .iter()
                .map(|r| {
                    let gbps = fmt_gbps_of_cost(r.beta_us_per_byte);
                    if l.regimes.len() == 1 {
                        gbps
                    } else if r.from_buffer_bytes > 0.0 {
                        format!("{} {gbps} from {}", r.name, fmt_bytes(r.from_buffer_bytes))
                    } else {
                        format!("{} {gbps}", r.name)
                    }
                })
                .collect();
            [
                td_text(&l.name),
                td(&fmt_us(l.alpha_us)),
                td_text(&bw.join(" → ")),
                td_text(&source),
            ]
            .concat()
        })
        .collect();
    s.push_str(&table(
        &[
            ("series", T),
            ("α per message", N),
            ("1/β by buffer size (GB/s)", T),
            ("from", T),
        ],
        &rows,
    ));
    let rows: Vec<String> = p
        .scale
        .iter()
        .map(|r| {
            let mut cells = [
                td_text(&r.name),
                td(&fmt_bytes(r.bytes as f64)),
                td(&r.ranks.to_string()),
                td_text(r.regime),
            ]
            .concat();
            for (a, t) in AllReduceAlgorithm::ALL.iter().zip(r.times_us) {
                let class = if *a == r.winner { " class=\"win\"" } else { "" };
                cells.push_str(&format!("<td{class}>{}</td>", escape_html(&fmt_us(t))));
            }
            cells.push_str(&td_text(r.winner.name()));
            cells
        })
        .collect();
    s.push_str(&table(
        &[
            ("series", T),
            ("S", N),
            ("ranks p", N),
            ("regime", T),
            ("ring", N),
            ("halving-doubling", N),
            ("binomial tree", N),
            ("fastest", T),
        ],
        &rows,
    ));
    let mut wins: Vec<(AllReduceAlgorithm, usize)> =
        AllReduceAlgorithm::ALL.iter().map(|a| (*a, 0)).collect();
    for r in p.scale {
        if let Some(w) = wins.iter_mut().find(|(a, _)| *a == r.winner) {
            w.1 += 1;
        }
    }
    let tally: Vec<String> = wins
        .iter()
        .map(|(a, n)| format!("{} {n}", a.name()))
        .collect();
    s.push_str(&format!(
        "<p>Fastest in {} predictions: {}. In this contention-free model \
         halving-doubling never loses on a power-of-two p (ring pays the same bandwidth \
         with p−1 instead of log2 p latencies, the tree moves the whole message every \
         step); rings win in practice on large messages because they only talk to \
         neighbours and pipeline, which the model leaves out.</p>\n",
        p.scale.len(),
        tally.join(", ")
    ));
    s.push_str("</section>\n");
    s
}

fn results_section(p: &Page<'_>) -> String {
    let ds = p.dataset;
    let mut s = String::from("<section id=\"results\"><h2>Results</h2>\n");
    for c in ds.collectives() {
        s.push_str(&format!("<h3>{}</h3>\n", c.key()));
        let rows: Vec<String> = ds
            .records_of(c)
            .iter()
            .map(|e| {
                let r = &e.record;
                let opt = |v: Option<f64>| v.map_or("—".into(), fmt_us);
                let wrong = match r.wrong {
                    w if w < 0 => td("not checked"),
                    0 => td("0"),
                    w => format!("<td class=\"bad\">{w}</td>"),
                };
                [
                    td_text(&ds.series[e.series].name),
                    td(&fmt_bytes(r.bytes as f64)),
                    td(&r.count.to_string()),
                    td_text(&r.dtype),
                    td_text(&r.op),
                    td(&r.root.to_string()),
                    td(if r.in_place { "yes" } else { "no" }),
                    td(&r.iters.to_string()),
                    td(&fmt_us(r.min_us)),
                    td(&fmt_us(r.median_us)),
                    td(&opt(r.mean_us)),
                    td(&opt(r.p99_us)),
                    td(&fmt_us(r.max_us)),
                    td(&sig3(r.algbw())),
                    td(&sig3(r.busbw())),
                    wrong,
                ]
                .concat()
            })
            .collect();
        s.push_str(&table(
            &[
                ("series", T),
                ("size", N),
                ("count", N),
                ("type", T),
                ("op", T),
                ("root", N),
                ("in place", N),
                ("iters", N),
                ("min", N),
                ("median", N),
                ("mean", N),
                ("p99", N),
                ("max", N),
                ("algbw GB/s", N),
                ("busbw GB/s", N),
                ("#wrong", N),
            ],
            &rows,
        ));
    }
    s.push_str("</section>\n");
    s
}

/// Flatten a manifest into `a.b.c = value` rows (arrays as JSON text).
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(map) => {
            if map.is_empty() && !prefix.is_empty() {
                out.push((prefix.to_string(), "{}".into()));
            }
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        serde_json::Value::Null => out.push((prefix.to_string(), "—".into())),
        serde_json::Value::String(s) => out.push((prefix.to_string(), s.clone())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

fn manifest_section(p: &Page<'_>) -> String {
    let mut s = String::from("<section id=\"manifest\"><h2>Manifests</h2>\n");
    for src in &p.dataset.sources {
        s.push_str(&format!(
            "<h3><code>{}</code></h3>\n<p class=\"muted\">{} record(s)</p>\n",
            escape_html(&src.path.display().to_string()),
            src.records
        ));
        let mut rows = Vec::new();
        flatten("", &src.manifest, &mut rows);
        if rows.is_empty() {
            s.push_str("<p>No manifest.</p>\n");
            continue;
        }
        let rows: Vec<String> = rows
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}<td class=\"text\"><code>{}</code></td>",
                    td_text(k),
                    escape_html(v)
                )
            })
            .collect();
        s.push_str(&table(&[("key", T), ("value", T)], &rows));
    }
    s.push_str("</section>\n");
    s
}

/// The whole page.
pub fn render_html(p: &Page<'_>) -> String {
    let files: Vec<String> = p
        .dataset
        .sources
        .iter()
        .map(|s| {
            format!(
                "<code>{}</code>",
                escape_html(&s.path.display().to_string())
            )
        })
        .collect();
    let mut s =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    s.push_str("<title>ringside report</title>\n<style>");
    s.push_str(STYLE);
    s.push_str("</style>\n</head>\n<body>\n<header>\n<h1>ringside report</h1>\n");
    s.push_str(&format!(
        "<p class=\"muted\">From {}</p>\n",
        files.join(", ")
    ));
    s.push_str(
        // Spaces between the links: they are the only places a narrow
        // screen may wrap the bar.
        "<nav><a href=\"#summary\">Summary</a> <a href=\"#charts\">Charts</a> \
         <a href=\"#model\">Cost model</a> <a href=\"#scale\">Scale</a> \
         <a href=\"#results\">Results</a> <a href=\"#manifest\">Manifests</a></nav>\n</header>\n<main>\n",
    );
    s.push_str(&summary_section(p));
    s.push_str(&charts_section(p));
    s.push_str(&model_section(p));
    s.push_str(&scale_section(p));
    s.push_str(&results_section(p));
    s.push_str(&manifest_section(p));
    s.push_str("</main>\n</body>\n</html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::fit_dataset;
    use crate::results::{Collective, FORMAT, Record, ResultsFile};
    use crate::summary::summarize;

    #[test]
    fn escapes_every_special_character() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape_html("plain µs"), "plain µs");
    }

    #[test]
    fn input_strings_are_escaped_in_the_page() {
        let evil = "<script>alert(1)</script>";
        let rec = |bytes| Record {
            label: evil.into(),
            backend: "x".into(),
            algo: String::new(),
            peer: false,
            collective: Collective::AllReduce,
            world: 2,
            bytes,
            count: 1,
            dtype: "<b>f32".into(),
            op: "\"sum\"".into(),
            root: -1,
            in_place: false,
            iters: 1,
            min_us: 1.0,
            median_us: 1.0 + bytes as f64 * 1e-3,
            mean_us: None,
            p99_us: None,
            max_us: 2.0 + bytes as f64 * 1e-3,
            algbw_gbps: None,
            busbw_gbps: None,
            wrong: 0,
        };
        let ds = crate::dataset::Dataset::from_files(vec![(
            "dir/<img src=x>.json".into(),
            ResultsFile {
                format: FORMAT.into(),
                manifest: serde_json::json!({"command": evil, "env": {"A&B": "<i>"}}),
                records: vec![rec(8), rec(4096)],
                figures: vec![],
            },
        )])
        .unwrap();
        let fits = fit_dataset(&ds);
        let summary = summarize(&ds, &fits);
        let html = render_html(&Page {
            dataset: &ds,
            fits: &fits,
            summary: &summary,
            charts: &[],
            links: &[],
            scale: &[],
        });
        assert!(!html.contains("<script"), "unescaped script tag");
        assert!(!html.contains("<img"), "unescaped file name");
        assert!(!html.contains("<b>f32") && !html.contains("<i>"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("env.A&amp;B"));
        assert!(html.contains("name=\"viewport\""));
    }

    #[test]
    fn a_chart_not_drawn_is_named_on_the_page_with_its_reason() {
        let ds = crate::testing::dataset(vec![crate::testing::record(
            "gloo",
            Collective::AllReduce,
            2,
            8,
            1.0,
        )]);
        let fits = fit_dataset(&ds);
        let mut summary = summarize(&ds, &fits);
        summary.charts_not_drawn.push(crate::ChartFailure {
            chart: "latency-all_reduce".into(),
            reason: "axis <range> empty".into(),
        });
        let html = render_html(&Page {
            dataset: &ds,
            fits: &fits,
            summary: &summary,
            charts: &[],
            links: &[],
            scale: &[],
        });
        assert!(html.contains("1 chart(s) could not be drawn"), "{html}");
        assert!(html.contains("<code>latency-all_reduce</code>: axis &lt;range&gt; empty"));
        assert!(!html.contains("No chart: no collective"));
        assert!(
            summary
                .to_string()
                .contains("chart latency-all_reduce not drawn: axis <range> empty")
        );
    }
}

"""The page's inline stylesheet and its Content-Security-Policy (no script, no fetch)."""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

STYLE = """
:root{--ink:#1d1d1f;--muted:#5f6368;--line:#e3e3e3;--bg:#fff;--soft:#f6f7f9;--accent:#0072B2;--bad:#b00020;--ok:#0a7d3e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"DejaVu Sans",sans-serif}
main{max-width:1120px;margin:0 auto;padding:24px 28px 64px}
header.page h1{font-size:26px;margin:0 0 4px}
h2{font-size:22px;margin:36px 0 2px;border-bottom:2px solid var(--ink);padding-bottom:4px}
h3{font-size:17px;margin:30px 0 10px;color:var(--ink)}
h4{font-size:15px;margin:18px 0 4px}
h5{font-size:12px;margin:10px 0 2px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.sub{color:var(--muted);margin:2px 0 10px;font-size:13.5px}
code{font:12.5px/1.4 ui-monospace,"DejaVu Sans Mono",Menlo,monospace;background:var(--soft);padding:1px 4px;
border-radius:3px;overflow-wrap:anywhere}
pre{font:12px/1.45 ui-monospace,"DejaVu Sans Mono",Menlo,monospace;background:var(--soft);padding:10px;
border:1px solid var(--line);border-radius:4px;overflow:auto;max-height:420px;white-space:pre-wrap;
overflow-wrap:anywhere}
.headline{display:flex;gap:24px;align-items:center;background:var(--soft);border-left:5px solid var(--accent);
padding:14px 18px;margin:14px 0;border-radius:4px}
.headline .big{white-space:nowrap}
.headline-value{font-size:40px;font-weight:700;font-variant-numeric:tabular-nums;color:var(--accent)}
.headline-value.none{font-size:22px;color:var(--muted)}
.headline .unit{display:block;color:var(--muted);font-size:13px}
.headline p{margin:0;font-size:13.5px}
nav.toc{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:13px;margin:8px 0 0;padding:8px 0;
border-bottom:1px solid var(--line)}
nav.toc a{color:var(--accent);text-decoration:none}
figure.chart{margin:8px 0 6px}
figure.chart svg{width:100%;height:auto;max-width:1000px;display:block}
svg.chart text{font-family:"DejaVu Sans","Liberation Sans",Arial,Helvetica,sans-serif}
figcaption{color:var(--muted);font-size:12.5px;margin-top:2px}
.tablewrap{overflow-x:auto;margin:8px 0 12px}
table{border-collapse:collapse;font-size:12.5px;min-width:40%}
caption{caption-side:top;text-align:left;color:var(--muted);font-size:12px;padding:2px 0}
th,td{padding:4px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
td:first-child{white-space:nowrap}
.ci{display:block;font-size:11px;color:var(--muted);white-space:nowrap}
th{background:var(--soft);font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.facts td:first-child{color:var(--muted);white-space:nowrap}
.note{color:var(--muted);font-style:italic;margin:6px 0}
.note.missing,.note.error{color:var(--bad)}
.missing{border:1px solid #f0c2c8;background:#fff5f6;border-radius:4px;padding:8px 14px;margin:10px 0;
font-size:13.5px}
.missing ul{margin:4px 0 0;padding-left:20px}
.bad{color:var(--bad);font-weight:600}.ok{color:var(--ok)}
.dec.PROMOTE{color:var(--ok)}.dec.DO_NOT_PROMOTE{color:var(--bad)}.dec.INCONCLUSIVE,.dec.UNTESTED{color:#9a6700}
details{margin:4px 0;border:1px solid var(--line);border-radius:4px;padding:4px 10px}
details[open]{padding-bottom:10px}
summary{cursor:pointer;font-size:13.5px}
.attempt{border-top:1px dashed var(--line);margin-top:8px}
ul.prov{padding-left:18px;font-size:13.5px}ul.prov li{margin:3px 0}
ul.diffs{font-size:13px;color:var(--muted)}
footer{margin-top:48px;color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding-top:8px}
@media print{main{max-width:none;padding:0}nav.toc{display:none}figure.chart,table,.headline{break-inside:avoid}
h2{break-before:page}section.part{break-inside:auto}pre{max-height:none}}
"""

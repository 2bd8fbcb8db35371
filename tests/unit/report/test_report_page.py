"""The HTML report: self-contained, escaped, faithful to the evidence, and never blank for a partial run."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_synth import rich_run

from servepack.cli.main import cli
from servepack.errors import UsageError
from servepack.packs import load_pack
from servepack.records.claims import history, pack_of
from servepack.records.evidence import build_evidence
from servepack.records.receipt import RECEIPT_NAME
from servepack.records.verify import read_receipt, verify_run
from servepack.registry.export import export_records
from servepack.registry.format import load_record
from servepack.report import write_report
from servepack.report.context import NOISE_FLOOR
from servepack.report.measured import render_measured
from servepack.report.page import render_report
from servepack.report.sources import load_source
from servepack.store import ResultsDir

PACK = load_pack(None).pack
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HOSTILE = "</svg></title><script>alert(1)</script><img src=x onerror=alert(2)>\"'&"


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of <style> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def parse(page: str) -> Tags:
    p = Tags()
    p.feed(page)
    p.close()
    return p


def external_refs(page: str) -> list[str]:
    """What would make a browser fetch or run something: scripts, handlers, non-local URLs, CSS imports."""
    p = parse(page)
    out = []
    for tag, attrs in p.tags:
        if tag in ("script", "link", "iframe", "object", "embed", "base", "frame", "audio", "video", "source"):
            out.append(f"<{tag}>")
        for name, value in attrs.items():
            if name.startswith("on"):
                out.append(f"{tag} {name}=")
            if name in ("src", "href", "xlink:href", "action", "formaction", "poster", "srcset", "background") \
                    and not (value or "").startswith(("#", "data:")):
                out.append(f"{tag} {name}={value}")
            if name == "style" and value and re.search(r"url\((?!#)|@import|expression\(", value):
                out.append(f"{tag} style={value}")
    for css in p.styles:
        if re.search(r"url\((?!#)|@import", css):
            out.append("stylesheet url/@import")
    return out


def charts(page: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r'<svg[^>]*data-chart="([^"]+)".*?</svg>', page, re.S)}


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("rich") / PACK.id
    rich_run(root, "2026-07-28T10-00-00Z-run", ended_at="2026-07-28T10:00:00.000Z", concurrency=(1,), gen=128,
             samples=4, seed=2)
    run = rich_run(root, "2026-07-29T10-00-00Z-run", ended_at="2026-07-29T10:00:00.000Z", gen=128, samples=4)
    return run, write_report([run]).read_text()


def test_page_is_self_contained_and_draws_every_chart_with_data(rich: tuple[Path, str]) -> None:
    _, page = rich
    assert external_refs(page) == []
    assert "default-src 'none'" in page and 'http-equiv=\'Content-Security-Policy\'' in page
    drawn = charts(page)
    assert set(drawn) == {"g0-speed", "g0-dist", "g0-conc", "g0-mem-2026-07-29t10-00-00z-run", "g0-roof",
                          "g0-smoke-agent-smoke-2026-07-29t10-00-00z-run"}
    for name, svg in drawn.items():
        assert svg.count("<path") > 10, name
    assert "note error" not in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "element ids must be unique across charts"


def test_the_checker_finds_what_would_reach_the_network() -> None:
    bad = ("<html><head><link rel=stylesheet href='https://cdn.example/x.css'><style>@import 'x.css';</style>"
           "</head><body><img src='http://example.invalid/p.png'><div onclick='x()'></div><script>1</script>"
           "<svg><use xlink:href='https://e.example/s.svg#a'/></svg><a href='#ok'>ok</a></body></html>")
    found = external_refs(bad)
    assert "<link>" in found and "<script>" in found and "stylesheet url/@import" in found
    assert "img src=http://example.invalid/p.png" in found and "div onclick=" in found
    assert "use xlink:href=https://e.example/s.svg#a" in found
    assert not any("#ok" in f for f in found)


def test_each_chart_has_its_numbers_in_a_table_and_hover_titles(rich: tuple[Path, str]) -> None:
    run, page = rich
    bench = json.loads((run / "server_bench.json").read_text())
    cell = next(c for c in bench["cells"] if (c["context_tokens"], c["concurrency"]) == (4096, 2))
    med = f"{cell['decode_tok_s_server']['median']:,.2f}"
    assert f">{med}<span class='ci'>" in page  # the table
    assert re.search(rf"<title>default · 128 gen · c2 · 4,096 prompt tokens · decode tok/s \(server\): median "
                     rf"{re.escape(med)}, 95% CI", charts(page)["g0-speed"])  # the point's tooltip
    agg = f"{cell['decode_tok_s_aggregate']['median']:,.2f}"
    assert agg in page.split('id="g0-conc"')[1]


def test_headline_figure_is_the_one_in_server_bench_json(rich: tuple[Path, str]) -> None:
    run, page = rich
    bench = json.loads((run / "server_bench.json").read_text())
    h = PACK.claims.headline
    cell = next(c for c in bench["cells"] if (c["context_tokens"], c["concurrency"], c["gen_tokens"])
                == (h.context_tokens, 1, h.gen_tokens))
    want = f"{cell[f'{h.metric}_{h.source}']['median']:,.2f}"
    found = re.findall(r"<span class='headline-value' data-metric='([a-z_]+)'>([^<]+)</span>", page)
    assert found == [(f"{h.metric}_{h.source}", want)]


def test_hostile_strings_from_records_are_text_never_markup(tmp_path: Path) -> None:
    run = rich_run(tmp_path / PACK.id, "r1", hostile=HOSTILE, status="partial", gen=128, samples=3,
                   concurrency=(1,))
    page = write_report([run]).read_text()
    assert external_refs(page) == []
    tags = {t for t, _ in parse(page).tags}
    assert "script" not in tags and "img" not in tags
    escaped = "&lt;/svg&gt;&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
    # In HTML text (case ids, rationale, request/response bodies, notes, the receipt error, the host) ...
    for where in ("case0", "why this case", "What is the weather in Paris?", "a note", "an error", "CPU"):
        assert f"{where}{escaped}" in page.replace("&quot;", '"').replace("&#x27;", "'"), where
    # ... and inside the charts (a category name is an axis label).
    smoke_svg = next(svg for name, svg in charts(page).items() if name.startswith("g0-smoke"))
    assert "multi_turn" + escaped in smoke_svg.replace("&quot;", '"').replace("&#x27;", "'")
    assert "<script" not in page.lower()


def test_ordinary_record_text_reads_as_written(rich: tuple[Path, str]) -> None:
    _, page = rich
    assert "<code>tool_json.case2</code>" in page  # a failing case, expandable
    assert "&quot;What is the weather in Paris?&quot;" in page  # its request, as JSON
    assert "EXTRACTION_CALL_IN_CONTENT" in page and "<details class='case'>" in page


def test_a_partial_run_without_smoke_says_what_is_missing(tmp_path: Path) -> None:
    run = rich_run(tmp_path / PACK.id, "r1", status="partial", smoke=False, memory=False, roofline=False,
                   concurrency=(1,), gen=128, samples=3)
    page = write_report([run]).read_text()
    assert "<strong>Missing or partial:</strong>" in page
    assert "r1: run partial" in page and "r1: no smoke results" in page
    assert "no smoke suite in this run" in page
    assert "r1: no memory.jsonl (the memory sampler did not run)" in page
    assert "no roofline (no model header)" in page
    assert "no headline" in page  # a partial run never carries the headline
    assert {"g0-speed", "g0-dist"} <= set(charts(page)) and "note error" not in page


def test_a_run_that_died_before_the_bench_still_renders(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "records"))
    from records_synth import write_receipt

    results = ResultsDir(tmp_path / PACK.id / "dead")
    results.write_text("server.log", "llama-server: error loading model\n")
    write_receipt(results, load_pack(None), "default", "2026-07-29T10:00:00.000Z", "failed")
    page = write_report([results.path]).read_text()
    assert "dead: run failed" in page and "dead: no bench summary (server_bench.json)" in page
    assert "no bench summary in these runs: nothing was measured" in page
    assert "no headline" in page and charts(page) == {} and "note error" not in page
    assert page.count("<section class=\"part\"") == 11


def test_a_pack_folder_shows_tip_and_history(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    rich_run(root, "a-old", ended_at="2026-07-27T10:00:00.000Z", concurrency=(1,), gen=128, samples=3, decode=30)
    new = rich_run(root, "b-new", ended_at="2026-07-28T10:00:00.000Z", concurrency=(1,), gen=128, samples=3)
    page = write_report([root]).read_text()
    assert "2 run(s) of this pack: tip and history" in page
    assert "Historical only: 1 older setting(s)" in page and "historical (superseded by b-new)" in page
    assert page.count("binds (tip of its kind)") >= 2 and "historical only" in page
    assert "run <code>b-new</code>" in page  # the headline's run
    assert (root / "report.html").is_file() and verify_run(new).ok


def test_several_inputs_side_by_side_need_an_out_file(tmp_path: Path) -> None:
    a = rich_run(tmp_path / "one" / PACK.id, "r1", concurrency=(1,), gen=128, samples=3)
    b = rich_run(tmp_path / "two" / PACK.id, "r2", concurrency=(1,), gen=128, samples=3, decode=50)
    with pytest.raises(UsageError, match="several DIRs: say where the page goes with --out"):
        write_report([a, b])
    page = write_report([a, b], tmp_path / "both.html").read_text()
    assert "<h2>Side by side</h2>" in page and "overview-speed" in charts(page)
    assert page.count("<article class='group'") == 2 and "#g1-top" in page


@pytest.mark.parametrize(("name", "why"), [
    ("page.txt", "name it \\*.html"),
    ("run/notes.html", "must be named report.html"),
    ("nowhere/page.html", "does not exist"),
    ("adir.html", "is a directory"),
])
def test_out_must_be_a_page_where_it_harms_nothing(tmp_path: Path, name: str, why: str) -> None:
    run = rich_run(tmp_path, "run", concurrency=(1,), gen=128, samples=2, smoke=False)
    (tmp_path / "adir.html").mkdir()
    with pytest.raises(UsageError, match=why):
        write_report([run], tmp_path / name)
    assert not (run / "notes.html").exists()


def test_report_is_derived_for_verify_and_other_files_are_not(tmp_path: Path) -> None:
    run = rich_run(tmp_path / PACK.id, "r1", concurrency=(1,), gen=128, samples=2)
    assert write_report([run]) == run / "report.html"
    assert verify_run(run).ok
    (run / "report2.html").write_text("<html></html>")
    rep = verify_run(run)
    assert [m.file for m in rep.mismatches] == ["report2.html"]


def test_noise_floor_is_labelled_as_measured_md_labels_it(tmp_path: Path) -> None:
    run = rich_run(tmp_path / PACK.id, "r1", concurrency=(1,), gen=8, samples=3, smoke=False)
    page = write_report([run]).read_text()
    ev = build_evidence(history(run), pack_of(read_receipt(run)))
    assert NOISE_FLOOR in render_measured(ev)
    assert f"<span class='ci'>{NOISE_FLOOR}</span>" in page and "(noise floor)" in page


def test_candidates_draw_a_forest_plot_with_the_decision(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    rich_run(root, "a-base", ended_at="2026-07-27T10:00:00.000Z", concurrency=(1,), gen=128, samples=4, smoke=False)
    rich_run(root, "b-cand", ended_at="2026-07-28T10:00:00.000Z", concurrency=(1,), gen=128, samples=4,
             preset="spec-ngram", decode=60, smoke=False)
    page = write_report([root]).read_text()
    forest = charts(page)["g0-forest"]
    assert "spec-ngram · 1024 ctx × 128 gen @c1 · decode tok/s (server)" in forest
    assert "<strong class='dec DO_NOT_PROMOTE'>DO_NOT_PROMOTE</strong>" in page \
        or "<strong class='dec PROMOTE'>PROMOTE</strong>" in page or "dec INCONCLUSIVE" in page
    assert "measured <code>b-cand</code> vs <code>a-base</code>" in page


def test_without_a_candidate_pair_the_pack_declaration_is_shown(rich: tuple[Path, str]) -> None:
    _, page = rich
    assert "no measured candidate/baseline pair in this history" in page
    assert "<strong class='dec UNTESTED'>UNTESTED</strong>" in page and "g0-forest" not in charts(page)


def test_registry_record_sits_beside_the_run(rich: tuple[Path, str], tmp_path: Path) -> None:
    run, _ = rich
    record = load_record(FIXTURES / "registry" / "laguna_dgx_spark_record.json")
    page = render_report([load_source(run)], [record])
    assert "laguna_dgx_spark_record.json" in page and "run ÷ record" in page
    assert "hardware: DIFFERS: record dgx-spark-gb10-128gb" in page
    assert "NOT_COMPARABLE: no metric can be claimed REPRODUCED (hardware differs" in page
    assert "no registry record given" not in page
    # the run measured no cell of the record's (8,192 ctx × 1,024 gen): no ratio to draw, each metric says why
    assert "g0-registry" not in charts(page)
    assert page.count("<span class='verdict NOT_COMPARABLE'") == 3


def test_a_record_of_the_run_is_drawn_beside_it(rich: tuple[Path, str], tmp_path: Path) -> None:
    run, _ = rich
    recipe, _ = export_records(run, tmp_path / "export")
    page = render_report([load_source(run)], [load_record(recipe)])
    assert "g0-registry" in charts(page)
    assert "<span class='verdict " in page


def test_inputs_that_are_not_runs_are_one_line_usage_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(cli, ["report", str(empty)])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [f"servepack: error: {empty}: no {RECEIPT_NAME} in it, in the folders "
                                            "inside it, or in theirs (give a run directory, a pack's results folder "
                                            "or the results folder)"]
    r = CliRunner().invoke(cli, ["report", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_cli_writes_the_page_and_prints_its_path(tmp_path: Path) -> None:
    run = rich_run(tmp_path / PACK.id, "r1", concurrency=(1,), gen=128, samples=2, smoke=False)
    r = CliRunner().invoke(cli, ["report", str(run)])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == str(run / "report.html")
    out = tmp_path / "elsewhere.html"
    r = CliRunner().invoke(cli, ["report", str(run.parent), "--out", str(out),
                                 "--record", str(FIXTURES / "registry" / "laguna_dgx_spark_record.json")])
    assert r.exit_code == 0, r.output
    assert "g0-registry" in out.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_folder_with_an_unreadable_run_leaves_it_out_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / PACK.id
    rich_run(root, "good", concurrency=(1,), gen=128, samples=2, smoke=False)
    (root / "broken").mkdir()
    (root / "broken" / RECEIPT_NAME).write_text("{not json")
    page = write_report([root]).read_text()
    assert "1 of 2 run folder(s) have a receipt that does not read; they are left out" in page


def test_the_results_root_shows_every_pack_folder_in_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    rich_run(results / PACK.id, "r1", concurrency=(1,), gen=128, samples=2, smoke=False)
    rich_run(results / "other-copy", "r2", concurrency=(1,), gen=128, samples=2, smoke=False)
    (results / "stray").mkdir()
    page = write_report([results]).read_text()
    assert page.count("<article class='group'") == 2 and "<h2>Side by side</h2>" in page

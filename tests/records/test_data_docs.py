"""Data Docs open offline: every CDN file a page links is served from the docs folder (checked
against the page's integrity hashes), and in Chromium with the network off the validation page
is styled and its table is a working bootstrap-table, as it is not with the CDN links."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import great_expectations as gx
import polars as pl
import pytest
from e2e.browser import launch_browser

from deepsummit.records.data_docs import ASSETS_DIR, CDN_FILES, serve_assets_locally
from deepsummit.records.expectations import validate_frame

EXPECTATIONS = [
    gx.expectations.ExpectColumnValuesToBeBetween(column="age", min_value=1, max_value=100),
    gx.expectations.ExpectColumnValuesToBeInSet(column="sex", value_set=["M", "F"]),
]


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    frame = pl.DataFrame({"age": [20, 35, 250], "sex": ["M", "F", "F"]})
    run_dir = tmp_path_factory.mktemp("docs")
    return validate_frame(frame, "people", EXPECTATIONS, run_dir).docs_index.parent


def pages(docs: Path) -> list[Path]:
    return sorted(docs.rglob("*.html"))


def validation_page(docs: Path) -> Path:
    (page,) = [p for p in pages(docs) if "validations" in p.parts]
    return page


def test_every_linked_file_is_local_and_exists(docs: Path) -> None:
    assert ASSETS_DIR.is_dir(), "make setup installs the Data Docs assets"
    for page in pages(docs):
        text = page.read_text()
        assert not any(url in text for url in CDN_FILES), page
        linked = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', text)
        assert linked, page
        for target in linked:
            assert (page.parent / target).resolve().is_file(), f"{page}: {target}"
        assert 'crossorigin="anonymous"' not in text


def offline_page_state(page: Path, shots: Path) -> dict[str, object]:
    with launch_browser(shots) as browser:
        driver = browser.driver
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        driver.get(page.as_uri())
        state = driver.execute_script(
            """return {
                bootstrap: getComputedStyle(document.body).fontFamily,
                jquery: typeof window.jQuery,
                table: document.querySelectorAll('.bootstrap-table').length,
                text: document.body.innerText,
            };"""
        )
        browser.screenshot(page.stem)
        return state


def test_the_validation_page_is_readable_offline(docs: Path, tmp_path: Path) -> None:
    state = offline_page_state(validation_page(docs), tmp_path / "shots")
    assert "apple-system" in state["bootstrap"]  # Bootstrap's font stack: its CSS loaded
    assert state["jquery"] == "function"
    assert state["table"] >= 1  # bootstrap-table ran over the results table
    assert "values must be greater than or equal to" in state["text"]
    assert "1 unexpected values found" in state["text"]


def test_with_the_cdn_links_the_same_page_is_bare_offline(docs: Path, tmp_path: Path) -> None:
    """What the test above would see without the local copies."""
    bare = tmp_path / "bare"
    shutil.copytree(docs, bare)
    page = validation_page(bare)
    text = page.read_text()
    for url, relative in CDN_FILES.items():
        text = re.sub(rf'"[./]*static/vendor/{re.escape(relative)}"', f'"{url}"', text)
    page.write_text(text)
    state = offline_page_state(page, tmp_path / "shots")
    assert "apple-system" not in state["bootstrap"]
    assert state["jquery"] == "undefined" and state["table"] == 0


def test_a_vendored_file_that_is_not_the_one_the_page_hashes_is_refused(
    docs: Path, tmp_path: Path
) -> None:
    assets = tmp_path / "assets"
    shutil.copytree(ASSETS_DIR, assets, symlinks=True)
    (assets / "bootstrap/dist/js/bootstrap.min.js").write_text("alert('not bootstrap')")
    site = tmp_path / "site"
    site.mkdir()
    page = site / "index.html"
    page.write_text(
        '<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js" '
        'integrity="sha384-JjSmVgyd0p3pXB1rRibZUAYoIIy6OrQ6VrjIEaFf/nJGzIxFDsf4x0xIM+B07jRM" '
        'crossorigin="anonymous"></script>'
    )
    with pytest.raises(RuntimeError, match=r"bootstrap\.min\.js: sha384"):
        serve_assets_locally(site, assets)

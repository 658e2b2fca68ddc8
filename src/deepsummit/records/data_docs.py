"""Data Docs that open without a network.

Great Expectations' pages load Bootstrap, jQuery, bootstrap-table, Font Awesome and Vega from
CDNs: offline they are an unstyled index. `make setup` installs the same files from npm
(deployments/data-docs-assets/package.json, into `<venv>/data-docs`); after each build they are
copied into the docs folder (`static/vendor/`) and every page points at its copy. A copy whose
CDN link carries a Subresource Integrity hash is checked against it, then the attribute goes (a
`file://` page cannot load a script with `crossorigin`). Without the installed files (a bare
wheel install) the pages keep their CDN links, and a warning says how to get them.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import shutil
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

ASSETS_DIR = Path(sys.prefix) / "data-docs" / "node_modules"
PACKAGE_FILE = "deployments/data-docs-assets/package.json"

# Each CDN file GX links (great_expectations/render/view/templates), and its file in the npm
# packages. GX links filter-control's CSS of bootstrap-table 1.19.0 beside 1.19.1's script;
# both pages get 1.19.1's.
CDN_FILES: dict[str, str] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css":
        "bootstrap/dist/css/bootstrap.min.css",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js":
        "bootstrap/dist/js/bootstrap.min.js",
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js":
        "popper.js/dist/umd/popper.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css":
        "bootstrap-table/dist/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js":
        "bootstrap-table/dist/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.css",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        "bootstrap-datepicker/dist/css/bootstrap-datepicker.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        "bootstrap-datepicker/dist/js/bootstrap-datepicker.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        "@fortawesome/fontawesome-free/css/all.min.css",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        "@forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css",
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/build/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite/build/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed/build/vega-embed.min.js",
}  # fmt: skip
# Folders a copied stylesheet loads by relative path (Font Awesome's ../webfonts/).
COMPANION_DIRS = ("@fortawesome/fontawesome-free/webfonts",)
VENDOR_DIR = Path("static") / "vendor"

_LINKED = re.compile(
    r'(?P<attribute>(?:src|href)=")(?P<url>[^"]+)"(?P<sri>\s+integrity="(?P<hash>[^"]+)"'
    r'\s+crossorigin="anonymous")?'
)


class AssetMismatch(RuntimeError):
    """A vendored file is not the one the page's integrity hash names."""


def serve_assets_locally(docs_dir: Path, assets: Path = ASSETS_DIR) -> int:
    """Copy the CDN files into `docs_dir` and point every page at them; the links rewritten."""
    if not assets.is_dir():
        logger.warning(
            "Data Docs keep their CDN links (no %s): install the files with `npm install "
            "--legacy-peer-deps --prefix %s` from %s (`make setup` does)",
            assets, assets.parent, PACKAGE_FILE,
        )  # fmt: skip
        return 0
    vendor = docs_dir / VENDOR_DIR
    for relative in (*CDN_FILES.values(), *COMPANION_DIRS):
        source, target = assets / relative, vendor / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
    rewritten = 0
    for page in docs_dir.rglob("*.html"):
        prefix = Path(os.path.relpath(vendor, page.parent)).as_posix()
        text = page.read_text()

        def local(match: re.Match[str], prefix: str = prefix) -> str:
            nonlocal rewritten
            relative = CDN_FILES.get(match["url"])
            if relative is None:
                return match[0]
            if match["hash"]:
                _check_integrity(vendor / relative, match["hash"])
            rewritten += 1
            return f'{match["attribute"]}{prefix}/{relative}"'

        page.write_text(_LINKED.sub(local, text))
    return rewritten


def _check_integrity(path: Path, expected: str) -> None:
    algorithm, _, digest = expected.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, path.read_bytes()).digest()).decode()
    if actual != digest:
        raise AssetMismatch(f"{path}: {algorithm} {actual} is not the page's {digest}")

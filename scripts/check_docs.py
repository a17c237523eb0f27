#!/usr/bin/env python3
"""Opens rustdoc pages in headless Chromium and checks that each renders, every image loads and no link is broken.

    scripts/check_docs.py [--browser PATH] PAGE_OR_DIR...

For each page (every ``*.html`` under a directory), a copy beside it gets a script that runs once the page has
loaded, inside the real browser (a 1 440 px wide window): every ``<img>`` must have loaded (``complete`` and a
natural width), every inline ``<svg>`` must have a size, every table must fit the page's width (no column behind a
horizontal scroll), and every link to a local page must reach a page that exists and, with a ``#fragment``,
holds an element of that id. Links to other sites are listed, not fetched (CI may be offline). Chromium prints the
page's DOM after the script ran; the result is read from it. Exit status 1 names every page and what failed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

CHECK = r"""
<script>
window.addEventListener('load', function () {
  var problems = [];
  var images = document.querySelectorAll('img');
  images.forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) { problems.push('image did not load: ' + img.getAttribute('src')); }
  });
  var drawings = document.querySelectorAll('.docblock svg');
  drawings.forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    if (box.width < 10 || box.height < 10) { problems.push('drawing has no size: ' + (svg.getAttribute('aria-label') || '?')); }
  });
  // A table wider than its column hides its last columns behind a horizontal scroll (rustdoc gives tables
  // `overflow-x: auto`): every table must fit at the window's width.
  var tables = document.querySelectorAll('.docblock table');
  tables.forEach(function (table) {
    // Overflowing its own box (a table shown as a scrolling block) or its column's (a table that grew past it).
    var column = table.parentElement.getBoundingClientRect();
    if (table.scrollWidth > table.clientWidth + 1 || table.getBoundingClientRect().right > column.right + 1) {
      var head = Array.prototype.map.call(table.querySelectorAll('th'), function (th) { return th.textContent; });
      problems.push('table wider than the page (' + table.scrollWidth + ' px in ' + Math.round(column.width) + '): ' +
        head.join(' | '));
    }
  });
  var links = 0, external = 0;
  var cache = {};
  document.querySelectorAll('a[href]').forEach(function (a) {
    var href = a.getAttribute('href');
    if (/^(https?:|mailto:)/.test(href)) { external++; return; }
    if (href.startsWith('javascript:')) { return; }
    links++;
    var url = new URL(a.href);
    var frag = url.hash ? decodeURIComponent(url.hash.slice(1)) : '';
    // Source-line ranges (src/…rs.html#1-210) are highlighted by rustdoc's script, not anchors.
    if (/^\d+(-\d+)?$/.test(frag)) { frag = ''; }
    var page = url.href.split('#')[0];
    var same = page === location.href.split('#')[0];
    var text;
    if (same) {
      text = null;
      if (frag && !document.getElementById(frag)) { problems.push('no anchor #' + frag + ' on this page'); }
      return;
    }
    if (!(page in cache)) {
      try {
        var xhr = new XMLHttpRequest();
        xhr.open('GET', page, false);
        xhr.send();
        cache[page] = (xhr.status === 0 || xhr.status === 200) && xhr.responseText ? xhr.responseText : null;
      } catch (e) { cache[page] = null; }
    }
    text = cache[page];
    if (text === null) { problems.push('broken link: ' + href); return; }
    if (frag && text.indexOf('id="' + frag + '"') < 0) { problems.push('no anchor #' + frag + ' in ' + href); }
  });
  var out = document.createElement('pre');
  out.id = 'docs-check-result';
  out.textContent = 'DOCS-CHECK ' + JSON.stringify({
    title: document.title, images: images.length, drawings: drawings.length, links: links, external: external,
    problems: problems });
  document.body.appendChild(out);
});
</script>
"""


# The window the pages are checked in: a laptop's browser, not a wide monitor's.
WIDTH = 1440


def browser(explicit):
    for name in ([explicit] if explicit else []) + ["chromium", "chromium-browser", "google-chrome", "chrome"]:
        path = shutil.which(name) if name else None
        if path:
            return path
    sys.exit("check_docs: no Chromium found (apt-get install chromium, or --browser PATH)")


def pages(paths):
    for path in paths:
        if os.path.isdir(path):
            for root, _, files in os.walk(path):
                for name in sorted(files):
                    if name.endswith(".html") and not name.endswith(".docs-check.html"):
                        yield os.path.join(root, name)
        else:
            yield path


def check(chrome, page, profile):
    with open(page, encoding="utf-8") as f:
        html = f.read()
    probe = page[: -len(".html")] + ".docs-check.html"
    with open(probe, "w", encoding="utf-8") as f:
        f.write(html.replace("</body>", CHECK + "</body>") if "</body>" in html else html + CHECK)
    try:
        run = subprocess.run(
            [chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--window-size=%d,1000" % WIDTH,
             "--user-data-dir=" + profile, "--virtual-time-budget=10000", "--dump-dom",
             "file://" + os.path.abspath(probe)],
            capture_output=True, text=True, timeout=120)
    finally:
        os.remove(probe)
    marker = 'id="docs-check-result">DOCS-CHECK '
    at = run.stdout.find(marker)
    if at >= 0:
        text = run.stdout[at + len(marker):].split("</pre>")[0]
        return json.loads(html_unescape(text))
    return {"problems": ["the page did not render (Chromium exit %d): %s" % (run.returncode, run.stderr[-400:])]}


def html_unescape(text):
    import html as html_module
    return html_module.unescape(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browser")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    chrome = browser(args.browser)
    failed = 0
    checked = 0
    with tempfile.TemporaryDirectory() as profile:
        for page in pages(args.paths):
            result = check(chrome, page, profile)
            checked += 1
            status = "ok" if not result["problems"] else "FAILED"
            print("%-6s %s (%s images, %s drawings, %s local links, %s external)" % (
                status, page, result.get("images", "?"), result.get("drawings", "?"), result.get("links", "?"),
                result.get("external", "?")))
            for problem in result["problems"]:
                print("         " + problem)
            failed += bool(result["problems"])
    print("check_docs: %d pages, %d failed" % (checked, failed))
    sys.exit(1 if failed or not checked else 0)


if __name__ == "__main__":
    main()

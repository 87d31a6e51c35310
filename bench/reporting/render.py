"""Render a :class:`~bench.reporting.document.Document` as HTML or GitHub markdown.

The HTML is self-contained: inline CSS, images embedded as ``data:image/png;base64``
URIs, no scripts, fonts or links to other servers, so it opens offline. The markdown
references ``figures/<name>.png`` files that the caller writes beside it.
"""
from __future__ import annotations

import base64
import html
import re

from .document import Banner, Bullets, Definitions, Document, Figure, KeyValues, Paragraph, Section
from .tables import Table, TextTable

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 1360px; margin: 2em auto; padding: 0 1.5em; line-height: 1.45; }
.banner { background: #fff3cd; border: 1px solid #e0c36a; padding: .6em 1em; font-weight: 600; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .15em; margin-top: 2em; }
h3 { margin-top: 1.6em; }
table { border-collapse: collapse; margin: .8em 0; font-size: 0.88em; }
th, td { border: 1px solid #d0d0d0; padding: .3em .6em; vertical-align: top; }
thead th { overflow-wrap: anywhere; min-width: 4.5em; }
thead th { background: #f0f0f0; }
tbody tr:nth-child(even) { background: #fafafa; }
th[scope=row] { text-align: left; font-weight: 600; min-width: 9em; max-width: 22em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.wide { font-size: .76em; }
table.wide th, table.wide td { padding: .25em .35em; }
table[class^="leaderboard"] { font-size: .8em; }
table[class^="leaderboard"] th { font-size: .95em; }
td.best { font-weight: 700; background: #e3f4e1; }
td.tie { font-style: italic; background: #f4f1dc; }
td.code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .92em;
          white-space: pre-wrap; overflow-wrap: anywhere; min-width: 24em; }
td.label { max-width: 22em; overflow-wrap: anywhere; }
caption { caption-side: bottom; text-align: left; color: #555; font-size: .9em; padding-top: .4em; }
ul.notes { color: #555; font-size: .85em; margin-top: .2em; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9em; margin-top: .3em; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
dl.kv dt { font-weight: 600; }
dl.kv dd { margin: 0; }
dl.defs dt { font-weight: 600; margin-top: .5em; }
nav ul { display: flex; flex-wrap: wrap; gap: .2em 1.6em; list-style: none; padding: 0; margin: .4em 0; }
.scroll { overflow-x: auto; }
"""

# ----------------------------------------------------------------------------- HTML


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html_table(t: Table) -> str:
    best = {c.key: t.best_rows(c.key) for c in t.columns}
    tied = {c.key: t.tied_rows(c.key) for c in t.columns}
    head = "".join(f"<th>{_breakable_title(c.title)}</th>" for c in t.columns)
    out = [f'<div class="scroll"><table class="{_table_class(t.name, len(t.columns) + 1)}">']
    if t.caption:
        out.append(f"<caption>{_e(t.caption)}</caption>")
    out.append(f"<thead><tr><th>{_e(t.index_title)}</th>{head}</tr></thead><tbody>")
    for row in t.rows:
        cells = []
        for c in t.columns:
            cls = "num best" if row in best[c.key] else "num tie" if row in tied[c.key] else "num"
            # "mean ± std" may wrap before the "±" only (a narrow column shows the std below the mean)
            cells.append(f'<td class="{cls}">{_e(t.cell_text(row, c.key)).replace(" ± ", " ±&nbsp;")}</td>')
        out.append(f'<tr><th scope="row">{_breakable(row)}</th>{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_breakable(n)}</li>" for n in t.notes) + "</ul>")
    return "\n".join(out)


def _breakable(label) -> str:
    """A configuration label, escaped, that may wrap after its commas and brackets (long
    ``method[option=...,option=...]`` labels would otherwise widen a table past the window)."""
    return re.sub(r"([,\[])", r"\1<wbr>", _e(label))


#: tables with more columns than this get the compact style (smaller type, tighter cells)
WIDE_COLUMNS = 12


def _table_class(name: str, columns: int) -> str:
    return _e(_slug(name)) + (" wide" if columns > WIDE_COLUMNS else "")


def _breakable_title(title) -> str:
    """A column title that may wrap after underscores and dots (``train_flops_per_example_step``)."""
    return re.sub(r"([_.])", r"\1<wbr>", _e(title))


def _html_text_table(t: TextTable) -> str:
    out = [f'<div class="scroll"><table class="{_table_class(t.name, len(t.columns))}">']
    if t.caption:
        out.append(f"<caption>{_e(t.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{_breakable_title(c)}</th>" for c in t.columns)
               + "</tr></thead><tbody>")
    for row in t.rows:
        cells = []
        for i, v in enumerate(row):
            if i in t.code_columns:
                cells.append(f'<td class="code">{_e(v)}</td>')
            elif i == 0:  # the row's label (a method configuration): may wrap after commas and brackets
                cells.append(f'<td class="label">{_breakable(v)}</td>')
            else:
                cells.append(f"<td>{_e(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _html_block(b, level: int) -> str:
    if isinstance(b, Section):
        return _html_section(b, level + 1)
    if isinstance(b, Banner):
        return f'<p class="banner" role="note">{_e(b.text)}</p>'
    if isinstance(b, Paragraph):
        return f"<p>{_e(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, KeyValues):
        return '<dl class="kv">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in b.items) + "</dl>"
    if isinstance(b, Definitions):
        return '<dl class="defs">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in b.items) + "</dl>"
    if isinstance(b, Figure):
        return (f'<figure id="fig-{_e(b.name)}"><img src="{png_data_uri(b.png)}" alt="{_e(b.alt or b.caption)}">'
                f"<figcaption>{_e(b.caption)}</figcaption></figure>")
    if isinstance(b, Table):
        return _html_table(b)
    if isinstance(b, TextTable):
        return _html_text_table(b)
    raise TypeError(f"cannot render {type(b).__name__}")


def _html_section(s: Section, level: int) -> str:
    h = min(level, 6)
    anchor = f' id="{_e(s.anchor)}"' if s.anchor else ""
    parts = [f"<section{anchor}><h{h}>{_e(s.title)}</h{h}>"]
    parts += [_html_block(b, level) for b in s.blocks]
    parts.append("</section>")
    return "\n".join(parts)


def to_html(doc: Document) -> str:
    nav = "".join(f'<li><a href="#{_e(s.anchor)}">{_e(s.title)}</a></li>' for s in doc.sections if s.anchor)
    body = "\n".join(_html_section(s, 2) for s in doc.sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(doc.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"<h1>{_e(doc.title)}</h1>\n"
        + (f"<nav><ul>{nav}</ul></nav>\n" if nav else "")
        + body + "\n</body>\n</html>\n"
    )


# ------------------------------------------------------------------------- markdown


def _md_escape(text) -> str:
    """Escape text for a GitHub markdown table cell or paragraph."""
    text = str(text).replace("\\", "\\\\").replace("|", "\\|")
    text = text.replace("<", "&lt;")  # no raw HTML; ">" is plain text except at a line start (a quote)
    text = re.sub(r"\s*\n\s*", " ", text).strip()
    return "\\" + text if text.startswith(">") else text


def _md_row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_table(t: Table) -> str:
    best = {c.key: t.best_rows(c.key) for c in t.columns}
    tied = {c.key: t.tied_rows(c.key) for c in t.columns}
    lines = [_md_row([_md_escape(t.index_title)] + [_md_escape(c.title) for c in t.columns]),
             _md_row([":---"] + ["---:"] * len(t.columns))]
    for row in t.rows:
        cells = [_md_escape(row)]
        for c in t.columns:
            text = _md_escape(t.cell_text(row, c.key))
            cells.append(f"**{text}**" if row in best[c.key] else f"_{text}_" if row in tied[c.key] else text)
        lines.append(_md_row(cells))
    out = "\n".join(lines)
    if t.caption:
        out += f"\n\n_{_md_escape(t.caption)}_"
    if t.notes:
        out += "\n\n" + "\n".join(f"- {_md_escape(n)}" for n in t.notes)
    return out


def markdown_table(t: Table) -> str:
    """One table as GitHub markdown (its caption below it in italics)."""
    return _md_table(t)


def _md_code_cell(text: str, limit: int = 400) -> str:
    text = re.sub(r"\s+", " ", str(text)).strip()
    if not text:
        return ""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("|", "\\|")
    # a backtick code span cannot hold a backtick; fall back to plain escaped text
    return _md_escape(text) if "`" in text else f"`{text}`"


def _md_text_table(t: TextTable) -> str:
    lines = [_md_row([_md_escape(c) for c in t.columns]), _md_row(["---"] * len(t.columns))]
    for row in t.rows:
        lines.append(_md_row([_md_code_cell(v) if i in t.code_columns else _md_escape(v)
                              for i, v in enumerate(row)]))
    out = "\n".join(lines)
    if t.caption:
        out += f"\n\n_{_md_escape(t.caption)}_"
    return out


def _md_block(b, level: int, figures_dir: str) -> str:
    if isinstance(b, Section):
        return _md_section(b, level + 1, figures_dir)
    if isinstance(b, Banner):
        return f"> **{_md_escape(b.text)}**"
    if isinstance(b, Paragraph):
        return _md_escape(b.text)
    if isinstance(b, Bullets):
        return "\n".join(f"- {_md_escape(i)}" for i in b.items)
    if isinstance(b, KeyValues):
        return "\n".join(f"- **{_md_escape(k)}**: {_md_escape(v)}" for k, v in b.items)
    if isinstance(b, Definitions):
        return "\n".join(f"- **{_md_escape(k)}**: {_md_escape(v)}" for k, v in b.items)
    if isinstance(b, Figure):
        alt = _md_escape(b.alt or b.caption).replace("[", "(").replace("]", ")")
        return f"![{alt}]({figures_dir}/{b.name}.png)\n\n_{_md_escape(b.caption)}_"
    if isinstance(b, Table):
        return _md_table(b)
    if isinstance(b, TextTable):
        return _md_text_table(b)
    raise TypeError(f"cannot render {type(b).__name__}")


def _md_section(s: Section, level: int, figures_dir: str) -> str:
    parts = [f"{'#' * min(level, 6)} {_md_escape(s.title)}"]
    parts += [_md_block(b, level, figures_dir) for b in s.blocks]
    return "\n\n".join(parts)


def to_markdown(doc: Document, figures_dir: str = "figures") -> str:
    body = "\n\n".join(_md_section(s, 2, figures_dir) for s in doc.sections)
    return f"# {_md_escape(doc.title)}\n\n{body}\n"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")

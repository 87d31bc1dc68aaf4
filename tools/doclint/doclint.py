#!/usr/bin/env python3
"""doclint: checks ortmem's docs/, README.md and the wiki/ Obsidian vault.

Usage:
    python3 tools/doclint/doclint.py [--root DIR] [PATH ...]

PATHs (files or folders, relative to the root) default to `wiki docs
README.md bench/README.md`; a folder means every *.md below it, folders whose
name starts with a dot (.obsidian, .trash) skipped. The root defaults to the
repository this script lives in. Prints one line per problem, `path:line: message`, sorted,
and exits 1 if there was any, 0 if none, 2 on a usage error (a PATH that does
not exist). Python 3 standard library only; it never touches the network.

Every rule below is also described in docs/memory/DOCS.md; its tests are
tests/doclint/test_doclint.py (meson test doclint).

Markdown structure (every file)
  A fenced code block opens with three or more backticks or tildes (any
  indentation, optionally inside a blockquote or callout, a backtick fence's
  info string holding no backtick) and closes with a line of the same
  character, at least as long, and nothing else. Text inside fenced code, and
  inside inline code spans (`...`, also across the lines of one paragraph), is
  never checked for links or numbers. A block is a paragraph, a list item (its
  continuation lines included), a heading or a table row (one line starting
  with `|`); blank lines, headings, table rows, list markers and fences end a
  block. Blockquote markers (`>`) are stripped first.

  fence       A code fence that is never closed (end of file), or that was
              opened inside a blockquote or callout which ends before it
              closes.

Links (every file)
  link        A relative Markdown link or image, `[text](target)`,
              `[text](<target>)`, `[text](target "title")`, or a reference
              definition `[id]: target`, whose target (URL-decoded, without
              `#anchor` or `?query`) does not exist relative to the file, or
              lies outside the root. Targets with a scheme (`https:`,
              `mailto:`, ...) are not checked. An absolute target (`/x`) is a
              problem: it means different things on GitHub and in Obsidian.
  anchor      A link `#anchor` into a Markdown file (or `#anchor` alone: the
              same file) that names no heading of that file. A heading matches
              by GitHub's slug (lower case, punctuation other than `-` and `_`
              removed, spaces to `-`, `-1`, `-2` ... for repeats) or by its text
              (case-insensitive, as Obsidian writes `#Heading%20text`).
  wikilink    In wiki/ notes, an Obsidian link `[[target]]`, `[[target|alias]]`,
              `[[target#heading]]`, `[[target#heading|alias]]`, `![[embed]]`,
              `[[#heading]]` (this note) that does not resolve. Resolution is
              Obsidian's, inside the vault (the wiki/ folder): a target without
              `/` matches a file name anywhere in the vault (a note by its name
              without `.md`, any other file by its full name), case-insensitive;
              a target with `/` must match the end of a vault path. Two notes
              matching is a problem (ambiguous). `#heading` must match a heading
              of the note (case-insensitive; characters Obsidian cannot keep in
              links, `# | ^ : % [ ]`, read as spaces); `#^block` references are
              not checked. `\\|` (a pipe escaped inside a table) counts as `|`.
              Obsidian comments `%%...%%` are skipped.

Frontmatter (wiki/ notes: every *.md under wiki/)
  frontmatter The note does not start with a `---` line, the block is not
              closed by `---` (or `...`), or a line in it is not the YAML subset
              notes use: `key: value` (plain, 'single' or "double" quoted
              scalar, or a flow list `[a, "b"]`), `key:` followed by `- item`
              lines (or indented `sub: value` lines for a nested mapping, or a
              `|` / `>` block scalar), comments and blank lines. A plain scalar
              may not start with one of `[ ] { } & * ! | > % @ \\`` or contain
              `: `; a key may not repeat.
  required    One of title, aliases, tags, status, lang, created, updated is
              missing, or has the wrong shape: title a non-empty string; aliases
              and tags lists (possibly empty) of strings; each tag without
              spaces and without a leading `#`; lang a language tag
              (`en`, `zh-CN`: `^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$`).
  status      status is not one of maintained, proposed, historical, draft.
  date        created or updated is not an ISO 8601 calendar date YYYY-MM-DD
              (quoted or not; a real date: no 2026-02-30), or updated is
              earlier than created.
  title       title differs from the file name (without `.md`), the note has
              no H1 (`# Title` or a setext `===` heading outside code), its
              first H1 differs from the title, or it has a second H1.

Performance numbers (files under docs/ and files named README.md; not
docs/memory/MEASUREMENTS.md, not wiki/)
  measurement A number followed by a performance unit has no MEASUREMENTS
              reference in the same block (its line, its table row, its
              paragraph or list item). Units: time ns, µs (also μs, us), ms, s;
              rates B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s,
              tok/s, tokens/s, ops/s; ratios `1.5×` or `10x` (the `×` or `x`
              right after the number, not followed by a number or `(`: `4 × n`
              and `2x2` are multiplications, `0x` is hex). A space, no-break
              space or thin space may separate a number from a time or rate
              unit. A reference is
                - a Markdown link to MEASUREMENTS.md (any relative path that
                  resolves to a file named MEASUREMENTS.md), with or without a
                  `#heading` anchor (the anchor rule checks the heading), or
                - a citation of the anchor system's design brief,
                  `DESIGN.md section N` (or `DESIGN.md §N`): the number is the
                  anchor's measurement, quoted, not ortmem's; or
                - a marker `<!-- doclint: not-measured REASON -->` for a number
                  that is not a measurement (a target, a limit), REASON being
                  non-empty.
              Each number without one is a problem of its own.
"""

import argparse
import datetime
import os
import re
import sys
import urllib.parse

DEFAULT_PATHS = ("wiki", "docs", "README.md", "bench/README.md")
STATUSES = ("maintained", "proposed", "historical", "draft")
REQUIRED = ("title", "aliases", "tags", "status", "lang", "created", "updated")
LANG_RE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

FENCE_OPEN_RE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
QUOTE_RE = re.compile(r"^( {0,3}>[ ]?)")
HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT_H1_RE = re.compile(r"^ {0,3}=+[ \t]*$")
LIST_RE = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
TABLE_RE = re.compile(r"^\s*\|")

SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# [text](target) and ![alt](target); text may hold one level of brackets and
# span lines; target optionally in <...>, optionally followed by a title.
LINK_RE = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFDEF_RE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
WIKILINK_RE = re.compile(r"!?\[\[([^\[\]\n]*)\]\]")
HTML_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
OBSIDIAN_COMMENT_RE = re.compile(r"%%.*?%%", re.S)
NOT_MEASURED_RE = re.compile(r"<!--\s*doclint:\s*not-measured\b(.*?)-->", re.S)
DESIGN_REF_RE = re.compile(r"DESIGN\.md`?,?\s+(?:section|§)\s*\d+")

_SPACE = "[ \u00a0\u2009\u202f]?"
_NUMBER = r"(?<![\w.,])(\d+(?:[.,]\d+)*)"
PERF_RE = re.compile(
    _NUMBER + "(?:"
    + _SPACE + r"(?P<rate>(?:[KMGT]i?B|B|tok|tokens|ops)/s)(?![\w/])"
    + "|" + _SPACE + r"(?P<time>ns|µs|μs|us|ms|s)(?![\w/])"
    + "|" + r"(?P<ratio>×|x)(?![\w])(?!\s*[\d(])"
    + ")")


class Problem:
    def __init__(self, path, line, message):
        self.path, self.line, self.message = path, line, message

    def key(self):
        return (self.path, self.line, self.message)

    def __str__(self):
        return "%s:%d: %s" % (self.path, self.line, self.message)


# ---------------------------------------------------------------- markdown

def strip_quote(line):
    """Returns (blockquote depth, the line without its '>' markers)."""
    depth = 0
    while True:
        m = QUOTE_RE.match(line)
        if not m:
            return depth, line
        depth += 1
        line = line[m.end():]


def blank_code_spans(text):
    """Replaces inline code spans with spaces (newlines kept), CommonMark style:
    a run of n backticks closes at the next run of exactly n."""
    out = list(text)
    i = 0
    n = len(text)
    while i < n:
        if text[i] != "`":
            i += 1
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        run = j - i
        k = j
        close = -1
        while k < n:
            if text[k] == "`":
                m = k
                while m < n and text[m] == "`":
                    m += 1
                if m - k == run:
                    close = k
                    break
                k = m
            else:
                k += 1
        if close < 0:
            i = j
            continue
        for p in range(i, close + run):
            if out[p] != "\n":
                out[p] = " "
        i = close + run
    return "".join(out)


def blank(pattern, text):
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


class Block:
    def __init__(self, first_line, lines):
        self.first_line = first_line  # 1-based
        self.text = "\n".join(lines)

    def line_of(self, offset):
        return self.first_line + self.text.count("\n", 0, offset)


class Parsed:
    """A Markdown file split into blocks outside code, its headings, and the
    structure problems (unclosed fences) found on the way."""

    def __init__(self, lines, start):
        self.blocks = []
        self.headings = []  # (line, level, text)
        self.fence_problems = []  # (line, message)
        self._parse(lines, start)

    def _parse(self, lines, start):
        current = []
        current_start = 0
        fence = None  # (char, length, depth, line)
        prev_para_line = None  # (line number, text) of a paragraph line, for setext

        def flush():
            nonlocal current
            if current:
                self.blocks.append(Block(current_start, current))
            current = []

        for index in range(start, len(lines)):
            number = index + 1
            depth, line = strip_quote(lines[index])
            if fence is not None:
                char, length, fdepth, fline = fence
                if depth < fdepth:
                    self.fence_problems.append(
                        (fline, "code fence opened here is not closed before its "
                                "blockquote or callout ends (line %d)" % number))
                    fence = None
                else:
                    m = re.match(r"^\s*(%s{%d,})\s*$" % (re.escape(char), length), line)
                    if m:
                        fence = None
                    continue
            m = FENCE_OPEN_RE.match(line)
            if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                flush()
                prev_para_line = None
                fence = (m.group(2)[0], len(m.group(2)), depth, number)
                continue
            if not line.strip():
                flush()
                prev_para_line = None
                continue
            h = HEADING_RE.match(line)
            if h:
                flush()
                prev_para_line = None
                text = re.sub(r"[ \t]+#+$", "", h.group(2) or "").strip()
                self.headings.append((number, len(h.group(1)), text))
                self.blocks.append(Block(number, [line]))
                continue
            if SETEXT_H1_RE.match(line) and prev_para_line is not None and current:
                # the paragraph's last line becomes an H1
                pline, ptext = prev_para_line
                current.pop()
                flush()
                self.headings.append((pline, 1, ptext.strip()))
                self.blocks.append(Block(pline, [ptext]))
                prev_para_line = None
                continue
            if TABLE_RE.match(line):
                flush()
                prev_para_line = None
                self.blocks.append(Block(number, [line]))
                continue
            if LIST_RE.match(line):
                flush()
            if not current:
                current_start = number
            current.append(line)
            prev_para_line = (number, line)
        flush()
        if fence is not None:
            self.fence_problems.append(
                (fence[3], "code fence opened here (%s) is never closed" % (fence[0] * fence[1])))


def github_slug(text):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_anchors(headings):
    slugs = set()
    seen = {}
    texts = set()
    for _, _, text in headings:
        slug = github_slug(text)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else "%s-%d" % (slug, count))
        texts.add(obsidian_heading_key(text))
    return slugs, texts


def obsidian_heading_key(text):
    text = re.sub(r"[#|^:%\[\]]", " ", text)
    return " ".join(text.split()).lower()


# ---------------------------------------------------------------- frontmatter

class FrontmatterError(Exception):
    def __init__(self, line, message):
        super().__init__(message)
        self.line = line
        self.message = message


def parse_scalar(raw, line):
    """Parses a flow scalar or flow list; returns a str or a list of str."""
    raw = raw.strip()
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise FrontmatterError(line, "unterminated flow list: %s" % raw)
        inner = raw[1:-1].strip()
        items = []
        if not inner:
            return items
        for part in split_flow(inner, line):
            value = parse_scalar(part, line)
            if isinstance(value, list):
                raise FrontmatterError(line, "nested list in frontmatter: %s" % raw)
            items.append(value)
        return items
    if raw.startswith('"'):
        m = re.match(r'^"((?:[^"\\]|\\.)*)"(\s+#.*)?$', raw)
        if not m:
            raise FrontmatterError(line, "unterminated or malformed double-quoted value: %s" % raw)
        return re.sub(r"\\(.)", r"\1", m.group(1))
    if raw.startswith("'"):
        m = re.match(r"^'((?:[^']|'')*)'(\s+#.*)?$", raw)
        if not m:
            raise FrontmatterError(line, "unterminated or malformed single-quoted value: %s" % raw)
        return m.group(1).replace("''", "'")
    raw = re.sub(r"\s+#.*$", "", raw)
    if raw and raw[0] in "]{}&*!|>%@`":
        raise FrontmatterError(line, "a plain value may not start with %r: %s" % (raw[0], raw))
    if ": " in raw or raw.endswith(":"):
        raise FrontmatterError(line, "a plain value may not contain ': ' (quote it): %s" % raw)
    return raw


def split_flow(inner, line):
    parts, current, quote = [], "", None
    for ch in inner:
        if quote:
            current += ch
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            current += ch
        elif ch == ",":
            parts.append(current)
            current = ""
        elif ch in "[]{}":
            raise FrontmatterError(line, "nested collection in a flow list: [%s]" % inner)
        else:
            current += ch
    if quote:
        raise FrontmatterError(line, "unterminated quote in flow list: [%s]" % inner)
    parts.append(current)
    if any(not p.strip() for p in parts):
        raise FrontmatterError(line, "empty item in flow list: [%s]" % inner)
    return parts


def parse_frontmatter(lines):
    """Returns (fields, key -> line, index of the first body line).
    Raises FrontmatterError."""
    if not lines or lines[0].rstrip() != "---":
        raise FrontmatterError(1, "missing YAML frontmatter: the note must start with a '---' line")
    end = None
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            end = i
            break
    if end is None:
        raise FrontmatterError(1, "frontmatter is not closed by a '---' line")
    fields, where = {}, {}
    key = None  # key whose value is a block (list, map or block scalar)
    mode = None
    i = 1
    while i < end:
        number = i + 1
        raw = lines[i]
        i += 1
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise FrontmatterError(number, "tab in frontmatter indentation")
        stripped = raw.strip()
        if mode == "scalar":
            if not stripped or raw[0] == " ":
                continue
            mode, key = None, None
        if not stripped or stripped.startswith("#"):
            continue
        top = re.match(r"^([A-Za-z_][\w.-]*)\s*:(?:[ ]+(.*))?\s*$", raw)
        if top:
            k, value = top.group(1), (top.group(2) or "").strip()
            if k in fields:
                raise FrontmatterError(number, "key '%s' repeats (first at line %d)" % (k, where[k]))
            where[k] = number
            value_nocomment = re.sub(r"^#.*$", "", value)
            if not value_nocomment:
                fields[k] = None  # filled by the block lines, if any
                key, mode = k, "block"
            elif re.match(r"^[|>][+-]?\d?\s*(#.*)?$", value):
                fields[k] = ""
                key, mode = k, "scalar"
            else:
                fields[k] = parse_scalar(value, number)
                key, mode = None, None
            continue
        item = re.match(r"^(\s*)-(?:[ ]+(.*))?\s*$", raw)
        if item and key is not None and mode in ("block", "list"):
            if fields[key] is None:
                fields[key] = []
            if not isinstance(fields[key], list):
                raise FrontmatterError(number, "list item under '%s', which holds a mapping" % key)
            if not (item.group(2) or "").strip():
                raise FrontmatterError(number, "empty list item under '%s'" % key)
            value = parse_scalar(item.group(2), number)
            if isinstance(value, list):
                raise FrontmatterError(number, "nested list under '%s'" % key)
            fields[key].append(value)
            mode = "list"
            continue
        sub = re.match(r"^\s+([A-Za-z_][\w.-]*)\s*:(?:[ ]+(.*))?\s*$", raw)
        if sub and key is not None and mode in ("block", "map"):
            if fields[key] is None:
                fields[key] = {}
            if isinstance(fields[key], dict):
                fields[key][sub.group(1)] = sub.group(2)
                mode = "map"
                continue
        raise FrontmatterError(number, "not a 'key: value' line or a list item: %s" % stripped)
    return fields, where, end + 1


def check_frontmatter(rel, lines, problems):
    """Returns (fields or None, first body line index)."""
    try:
        fields, where, body = parse_frontmatter(lines)
    except FrontmatterError as error:
        problems.append(Problem(rel, error.line, "frontmatter: " + error.message))
        body = 0
        if lines and lines[0].rstrip() == "---":
            body = len(lines)  # not closed: nothing after it can be read as Markdown
            for i in range(1, len(lines)):
                if lines[i].rstrip() in ("---", "..."):
                    body = i + 1
                    break
        return None, body
    for k in REQUIRED:
        if k not in fields:
            problems.append(Problem(rel, 1, "frontmatter: required field '%s' is missing" % k))
    line = lambda k: where.get(k, 1)
    title = fields.get("title")
    if "title" in fields and (not isinstance(title, str) or not title.strip()):
        problems.append(Problem(rel, line("title"), "frontmatter: title must be a non-empty string"))
    for k in ("aliases", "tags"):
        if k not in fields:
            continue
        value = fields[k]
        if not isinstance(value, list):
            problems.append(Problem(rel, line(k), "frontmatter: %s must be a list (use [] for none)" % k))
            continue
        for item in value:
            if not isinstance(item, str) or not item.strip():
                problems.append(Problem(rel, line(k), "frontmatter: %s holds an empty item" % k))
            elif k == "tags" and (item.startswith("#") or re.search(r"\s", item)):
                problems.append(Problem(rel, line(k),
                                        "frontmatter: tag '%s' has a space or a leading '#'" % item))
    if "status" in fields and fields["status"] not in STATUSES:
        problems.append(Problem(rel, line("status"), "status '%s' is not one of %s"
                                % (fields["status"], ", ".join(STATUSES))))
    if "lang" in fields and not (isinstance(fields["lang"], str) and LANG_RE.match(fields["lang"])):
        problems.append(Problem(rel, line("lang"),
                                "frontmatter: lang '%s' is not a language tag like en or zh-CN"
                                % (fields["lang"],)))
    dates = {}
    for k in ("created", "updated"):
        if k not in fields:
            continue
        value = fields[k]
        parsed = None
        if isinstance(value, str) and DATE_RE.match(value):
            try:
                parsed = datetime.date.fromisoformat(value)
            except ValueError:
                parsed = None
        if parsed is None:
            problems.append(Problem(rel, line(k), "%s '%s' is not an ISO date (YYYY-MM-DD)" % (k, value)))
        else:
            dates[k] = parsed
    if len(dates) == 2 and dates["updated"] < dates["created"]:
        problems.append(Problem(rel, line("updated"), "updated %s is earlier than created %s"
                                % (dates["updated"], dates["created"])))
    return fields, body


# ---------------------------------------------------------------- the checker

class Checker:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.problems = []
        self._parsed = {}
        self._vault = None

    # files ------------------------------------------------------------
    def rel(self, path):
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def read_lines(self, path):
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            return handle.read().split("\n")

    def parsed(self, path):
        """Parsed body of a Markdown file (frontmatter skipped when present)."""
        path = os.path.realpath(path)
        if path not in self._parsed:
            try:
                lines = self.read_lines(path)
            except OSError:
                lines = []
            start = 0
            if lines and lines[0].rstrip() == "---":
                for i in range(1, len(lines)):
                    if lines[i].rstrip() in ("---", "..."):
                        start = i + 1
                        break
            self._parsed[path] = Parsed(lines, start)
        return self._parsed[path]

    def vault(self):
        """Every file in wiki/: list of (vault-relative path without .md for
        notes, lower-cased; full path)."""
        if self._vault is None:
            self._vault = []
            base = os.path.join(self.root, "wiki")
            for directory, dirs, files in os.walk(base):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    full = os.path.join(directory, name)
                    vrel = os.path.relpath(full, base).replace(os.sep, "/")
                    self._vault.append((vrel, full))
        return self._vault

    # rules ------------------------------------------------------------
    def check_file(self, path):
        rel = self.rel(path)
        lines = self.read_lines(path)
        in_wiki = rel.startswith("wiki/")
        body = 0
        if in_wiki:
            fields, body = check_frontmatter(rel, lines, self.problems)
        parsed = Parsed(lines, body)
        self._parsed[os.path.realpath(path)] = parsed
        for line, message in parsed.fence_problems:
            self.problems.append(Problem(rel, line, message))
        if in_wiki and not (fields is None and body >= len(lines)):
            # (an unclosed frontmatter leaves no body to find an H1 in)
            self.check_title(rel, path, fields, parsed)
        perf = (not in_wiki and os.path.basename(path) != "MEASUREMENTS.md"
                and (rel.startswith("docs/") or os.path.basename(path) == "README.md"))
        for block in parsed.blocks:
            text = blank_code_spans(block.text)
            comments_blank = blank(HTML_COMMENT_RE, text)
            if in_wiki:
                comments_blank = blank(OBSIDIAN_COMMENT_RE, comments_blank)
            self.check_links(rel, path, block, comments_blank)
            if in_wiki:
                self.check_wikilinks(rel, path, block, comments_blank)
            if perf:
                self.check_numbers(rel, path, block, text, comments_blank)

    def check_title(self, rel, path, fields, parsed):
        stem = os.path.splitext(os.path.basename(path))[0]
        title = fields.get("title") if fields else None
        if isinstance(title, str) and title != stem:
            self.problems.append(Problem(rel, 1, "title '%s' differs from the file name '%s'"
                                         % (title, stem)))
        h1s = [(line, text) for line, level, text in parsed.headings if level == 1]
        if not h1s:
            self.problems.append(Problem(rel, 1, "the note has no H1 heading"))
            return
        line, text = h1s[0]
        expected = title if isinstance(title, str) else stem
        if text != expected:
            self.problems.append(Problem(rel, line, "H1 '%s' differs from the title '%s'"
                                         % (text, expected)))
        for line, text in h1s[1:]:
            self.problems.append(Problem(rel, line, "a second H1 heading '%s'" % text))

    def link_targets(self, text):
        for m in LINK_RE.finditer(text):
            target = m.group(1)
            if target.startswith("<"):
                target = target[1:-1]
            yield m.start(), target, m.end()
        for m in re.finditer(r"(?m)^.*$", text):
            d = REFDEF_RE.match(m.group(0))
            if d:
                target = d.group(1)
                if target.startswith("<"):
                    target = target[1:-1]
                yield m.start(), target, m.end()

    def resolve(self, path, target):
        """Returns (full path or None, anchor or None, problem message or None)."""
        anchor = None
        if "#" in target:
            target, anchor = target.split("#", 1)
            anchor = urllib.parse.unquote(anchor)
        target = target.split("?", 1)[0]
        target = urllib.parse.unquote(target)
        if not target:
            return os.path.realpath(path), anchor, None
        if target.startswith("/"):
            return None, anchor, "absolute link target '%s': use a path relative to the file" % target
        full = os.path.normpath(os.path.join(os.path.dirname(path), target))
        real = os.path.realpath(full)
        if not (real == self.root or real.startswith(self.root + os.sep)):
            return None, anchor, "link target '%s' lies outside the repository" % target
        if not os.path.exists(full):
            return None, anchor, "link target '%s' does not exist" % target
        return full, anchor, None

    def check_links(self, rel, path, block, text):
        for offset, target, _ in self.link_targets(text):
            if not target or SCHEME_RE.match(target):
                continue
            full, anchor, message = self.resolve(path, target)
            line = block.line_of(offset)
            if message:
                self.problems.append(Problem(rel, line, message))
                continue
            if anchor and full.endswith(".md") and os.path.isfile(full) and not anchor.startswith("^"):
                slugs, texts = heading_anchors(self.parsed(full).headings)
                if anchor not in slugs and obsidian_heading_key(anchor) not in texts:
                    self.problems.append(Problem(rel, line, "link anchor '#%s' names no heading of %s"
                                                 % (anchor, self.rel(full))))

    def check_wikilinks(self, rel, path, block, text):
        for m in WIKILINK_RE.finditer(text):
            inner = m.group(1).replace("\\|", "|")
            target = inner.split("|", 1)[0].strip()
            line = block.line_of(m.start())
            heading = None
            if "#" in target:
                target, heading = target.split("#", 1)
                target = target.strip()
            if not target:
                full = path
            else:
                matches = self.resolve_wikilink(target)
                if not matches:
                    self.problems.append(Problem(rel, line, "wikilink [[%s]] resolves to no file in the vault"
                                                 % inner))
                    continue
                if len(matches) > 1:
                    self.problems.append(Problem(rel, line, "wikilink [[%s]] is ambiguous: %s"
                                                 % (inner, ", ".join(self.rel(f) for f in matches))))
                    continue
                full = matches[0]
            if heading and not heading.startswith("^") and full.endswith(".md"):
                wanted = obsidian_heading_key(heading.split("#")[-1])
                _, texts = heading_anchors(self.parsed(full).headings)
                if wanted not in texts:
                    self.problems.append(Problem(rel, line, "wikilink [[%s]]: no heading '%s' in %s"
                                                 % (inner, heading, self.rel(full))))

    def resolve_wikilink(self, target):
        wanted = target.lower().lstrip("/")
        if wanted.startswith("wiki/"):
            wanted = wanted[len("wiki/"):]
        found = []
        for vrel, full in self.vault():
            low = vrel.lower()
            names = [low]
            if low.endswith(".md"):
                names.append(low[:-3])
            for name in names:
                if "/" in wanted:
                    hit = name == wanted or name.endswith("/" + wanted)
                else:
                    hit = name.rsplit("/", 1)[-1] == wanted
                if hit:
                    found.append(full)
                    break
        return found

    def is_measurement_link(self, path, target):
        if SCHEME_RE.match(target):
            return False
        full, _, message = self.resolve(path, target)
        return message is None and full is not None and os.path.basename(full) == "MEASUREMENTS.md" \
            and os.path.isfile(full)

    def check_numbers(self, rel, path, block, code_blank, text):
        # Link targets are not prose: blank them so their numbers do not count.
        has_reference = (any(m.group(1).strip() for m in NOT_MEASURED_RE.finditer(code_blank))
                         or bool(DESIGN_REF_RE.search(block.text)))
        for _, target, _ in self.link_targets(text):
            if self.is_measurement_link(path, target.strip("<>")):
                has_reference = True
        if has_reference:
            return
        scan = LINK_RE.sub(lambda m: re.sub(r"\]\(.*", lambda t: re.sub(r"[^\n]", " ", t.group(0)),
                                            m.group(0), flags=re.S), text)
        for m in PERF_RE.finditer(scan):
            if (m.group("ratio") == "x" and m.group(1) == "0"):
                continue
            number = m.group(0).strip()
            self.problems.append(Problem(
                rel, block.line_of(m.start()),
                "performance number '%s' has no MEASUREMENTS.md reference in its line, "
                "table row or paragraph" % number))


def expand(root, paths):
    files = []
    for p in paths:
        full = os.path.join(root, p)
        if os.path.isdir(full):
            for directory, dirs, names in os.walk(full):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    if name.endswith(".md"):
                        files.append(os.path.join(directory, name))
        elif os.path.isfile(full):
            files.append(full)
        else:
            return None, p
    return sorted(set(files)), None


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(
        prog="doclint",
        description="Checks docs/, README.md and the wiki/ vault (rules: docs/memory/DOCS.md).")
    parser.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")),
                        help="repository root (default: the repository holding this script)")
    parser.add_argument("paths", nargs="*", help="files or folders relative to the root "
                        "(default: %s; those missing are skipped)" % " ".join(DEFAULT_PATHS))
    args = parser.parse_args(argv)
    root = args.root
    paths = args.paths
    if not paths:
        paths = [p for p in DEFAULT_PATHS if os.path.exists(os.path.join(root, p))]
    files, missing = expand(root, paths)
    if files is None:
        print("doclint: %s: no such file or folder under %s" % (missing, root), file=sys.stderr)
        return 2
    checker = Checker(root)
    for path in files:
        checker.check_file(path)
    problems = sorted({p.key(): p for p in checker.problems}.values(), key=lambda p: p.key())
    for p in problems:
        print(p)
    if problems:
        print("doclint: %d problem%s in %d file%s checked"
              % (len(problems), "" if len(problems) == 1 else "s", len(files),
                 "" if len(files) == 1 else "s"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tests of tools/doclint/doclint.py (rules: docs/memory/DOCS.md).

Each case writes a small repository into a temporary folder (a wiki/ vault, a
docs/memory/MEASUREMENTS.md, a README.md), runs the checker on it as a child
process, and checks the exit status and the `path:line: message` lines. Every
rule has broken cases that must fail and good cases that must pass.

Run: python3 tests/doclint/test_doclint.py [-v]   (meson: the test 'doclint')
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DOCLINT = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "doclint", "doclint.py"))

MEASUREMENTS = """\
# Measurements

## Granule commit

| variant | time |
|---|---|
| pooled | 348 µs |

## Cost of accounting

1.56 µs against 1.52 µs.
"""


def note(name, body="", **fields):
    """A wiki note named `name` with valid frontmatter and an H1; fields
    override the frontmatter's values or (None) drop them."""
    front = {
        "title": name,
        "aliases": "[]",
        "tags": "[memory]",
        "status": "maintained",
        "lang": "en",
        "created": "2026-12-01",
        "updated": "2026-12-02",
    }
    front.update(fields)
    lines = ["---"]
    for key, value in front.items():
        if value is not None:
            lines.append("%s: %s" % (key, value))
    lines.append("---")
    lines.append("")
    lines.append("# %s" % name)
    lines.append("")
    lines.append(textwrap.dedent(body))
    return "\n".join(lines)


class DoclintCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="doclint-test-")
        self.root = self.tmp.name
        self.write("docs/memory/MEASUREMENTS.md", MEASUREMENTS)
        self.write("README.md", "# Project\n")
        self.write("wiki/start/Home.md", note("Home", "See [[Other]].\n"))
        self.write("wiki/memory/Other.md", note("Other", "## Section Two\n\nBack to [[Home]].\n"))

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(textwrap.dedent(text) if not text.startswith("---") else text)

    def run_lint(self, *paths):
        result = subprocess.run([sys.executable, DOCLINT, "--root", self.root] + list(paths),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=60)
        return result.returncode, result.stdout.splitlines(), result.stderr

    def assert_clean(self, *paths):
        code, lines, err = self.run_lint(*paths)
        self.assertEqual(lines, [], "expected no problems, got:\n" + "\n".join(lines))
        self.assertEqual(code, 0, err)

    def assert_fails(self, path_line, fragment, *paths):
        """Exactly one problem, at `path:line`, whose message holds `fragment`."""
        code, lines, err = self.run_lint(*paths)
        self.assertEqual(code, 1, "expected exit 1, got %d; output:\n%s%s" % (code, "\n".join(lines), err))
        matching = [l for l in lines if l.startswith(path_line + ": ") and fragment in l]
        self.assertTrue(matching, "no '%s: ...%s...' among:\n%s" % (path_line, fragment, "\n".join(lines)))
        self.assertEqual(len(lines), 1, "expected one problem, got:\n" + "\n".join(lines))


class Baseline(DoclintCase):
    def test_the_fixture_is_clean(self):
        self.assert_clean()

    def test_a_missing_path_is_a_usage_error(self):
        code, lines, err = self.run_lint("nowhere")
        self.assertEqual(code, 2)
        self.assertIn("nowhere", err)

    def test_output_is_path_line_message_sorted(self):
        self.write("docs/b.md", "[x](missing.md)\n")
        self.write("docs/a.md", "\n\n[y](gone.md)\n[x](missing.md)\n")
        code, lines, _ = self.run_lint("docs")
        self.assertEqual(code, 1)
        self.assertEqual(lines, [
            "docs/a.md:3: link target 'gone.md' does not exist",
            "docs/a.md:4: link target 'missing.md' does not exist",
            "docs/b.md:1: link target 'missing.md' does not exist",
        ])


class Frontmatter(DoclintCase):
    def test_missing_frontmatter_fails(self):
        self.write("wiki/Bare.md", "# Bare\n\ntext\n")
        self.assert_fails("wiki/Bare.md:1", "missing YAML frontmatter", "wiki/Bare.md")

    def test_unclosed_frontmatter_fails(self):
        self.write("wiki/Open.md", "---\ntitle: Open\n\n# Open\n")
        self.assert_fails("wiki/Open.md:1", "not closed", "wiki/Open.md")

    def test_a_line_that_is_not_key_value_fails(self):
        text = note("Odd").replace("lang: en", "lang: en\njust words here")
        self.write("wiki/Odd.md", text)
        self.assert_fails("wiki/Odd.md:7", "not a 'key: value' line", "wiki/Odd.md")

    def test_an_unterminated_quote_fails(self):
        self.write("wiki/Quote.md", note("Quote", aliases='["one, two]'))
        self.assert_fails("wiki/Quote.md:3", "unterminated", "wiki/Quote.md")

    def test_a_plain_value_with_colon_space_fails(self):
        self.write("wiki/Colon.md", note("Colon", aliases="[x]\nsummary: a: b"))
        self.assert_fails("wiki/Colon.md:4", "may not contain ': '", "wiki/Colon.md")

    def test_a_repeated_key_fails(self):
        self.write("wiki/Twice.md", note("Twice", tags="[a]\ntags: [b]"))
        self.assert_fails("wiki/Twice.md:5", "repeats", "wiki/Twice.md")

    def test_block_lists_quotes_comments_and_extra_keys_pass(self):
        text = ("---\n"
                "# a comment\n"
                "title: 'Block Style'\n"
                "aliases:\n"
                "  - \"Block: style\"\n"
                "  - other name\n"
                "tags:\n"
                "- memory\n"
                "- start/basics\n"
                "status: draft\n"
                "lang: zh-CN\n"
                "created: \"2026-01-31\"\n"
                "updated: 2026-02-01  # changed meaning\n"
                "cssclasses: []\n"
                "description: >\n"
                "  folded text: with a colon\n"
                "---\n\n# Block Style\n")
        self.write("wiki/Block Style.md", text)
        self.assert_clean("wiki/Block Style.md")


class Required(DoclintCase):
    def test_each_missing_field_fails(self):
        for field in ("title", "aliases", "tags", "status", "lang", "created", "updated"):
            with self.subTest(field=field):
                self.write("wiki/Missing.md", note("Missing", **{field: None}))
                self.assert_fails("wiki/Missing.md:1", "required field '%s' is missing" % field,
                                  "wiki/Missing.md")

    def test_aliases_not_a_list_fails(self):
        self.write("wiki/Alias.md", note("Alias", aliases="just one"))
        self.assert_fails("wiki/Alias.md:3", "aliases must be a list", "wiki/Alias.md")

    def test_a_tag_with_a_hash_fails(self):
        self.write("wiki/Tag.md", note("Tag", tags="['#memory']"))
        self.assert_fails("wiki/Tag.md:4", "leading '#'", "wiki/Tag.md")

    def test_a_bad_lang_fails(self):
        self.write("wiki/Lang.md", note("Lang", lang="Chinese"))
        self.assert_fails("wiki/Lang.md:6", "not a language tag", "wiki/Lang.md")

    def test_empty_lists_and_zh_cn_pass(self):
        self.write("wiki/Fine.md", note("Fine", aliases="[]", tags="[]", lang="zh-CN"))
        self.assert_clean("wiki/Fine.md")


class Status(DoclintCase):
    def test_an_unknown_status_fails(self):
        self.write("wiki/Stat.md", note("Stat", status="implemented"))
        self.assert_fails("wiki/Stat.md:5", "status 'implemented' is not one of", "wiki/Stat.md")

    def test_the_four_statuses_pass(self):
        for status in ("maintained", "proposed", "historical", "draft"):
            with self.subTest(status=status):
                self.write("wiki/Stat.md", note("Stat", status=status))
                self.assert_clean("wiki/Stat.md")


class Dates(DoclintCase):
    def test_a_non_iso_date_fails(self):
        self.write("wiki/Date.md", note("Date", created="02/12/2026"))
        self.assert_fails("wiki/Date.md:7", "created '02/12/2026' is not an ISO date", "wiki/Date.md")

    def test_an_impossible_date_fails(self):
        self.write("wiki/Date.md", note("Date", updated="2026-02-30"))
        self.assert_fails("wiki/Date.md:8", "updated '2026-02-30' is not an ISO date", "wiki/Date.md")

    def test_a_datetime_is_not_a_date(self):
        self.write("wiki/Date.md", note("Date", updated="2026-12-02T10:00:00"))
        self.assert_fails("wiki/Date.md:8", "not an ISO date", "wiki/Date.md")

    def test_updated_before_created_fails(self):
        self.write("wiki/Date.md", note("Date", created="2026-12-03"))
        self.assert_fails("wiki/Date.md:8", "earlier than created", "wiki/Date.md")

    def test_quoted_and_plain_iso_dates_pass(self):
        self.write("wiki/Date.md", note("Date", created="'2024-02-29'", updated="2026-12-02"))
        self.assert_clean("wiki/Date.md")


class Title(DoclintCase):
    def test_a_title_that_differs_from_the_file_name_fails(self):
        text = note("Right Name").replace("title: Right Name", "title: Wrong Name")
        text = text.replace("# Right Name", "# Wrong Name")
        self.write("wiki/Right Name.md", text)
        self.assert_fails("wiki/Right Name.md:1", "differs from the file name 'Right Name'",
                          "wiki/Right Name.md")

    def test_an_h1_that_differs_from_the_title_fails(self):
        self.write("wiki/Head.md", note("Head").replace("# Head", "# Heading"))
        self.assert_fails("wiki/Head.md:11", "H1 'Heading' differs from the title 'Head'", "wiki/Head.md")

    def test_no_h1_fails_and_one_in_code_does_not_count(self):
        self.write("wiki/NoH1.md", note("NoH1").replace("# NoH1", "```\n# NoH1\n```"))
        self.assert_fails("wiki/NoH1.md:1", "no H1", "wiki/NoH1.md")

    def test_a_second_h1_fails(self):
        self.write("wiki/Two.md", note("Two", "# Two again\n"))
        self.assert_fails("wiki/Two.md:13", "a second H1", "wiki/Two.md")

    def test_matching_title_file_name_and_h1_pass_also_setext(self):
        self.write("wiki/Same.md", note("Same", "## Sub\n"))
        self.write("wiki/Setext.md", note("Setext").replace("# Setext", "Setext\n======"))
        self.assert_clean("wiki/Same.md", "wiki/Setext.md")


class Wikilinks(DoclintCase):
    def test_an_unresolved_wikilink_fails(self):
        self.write("wiki/L.md", note("L", "Read [[Nowhere]] first.\n"))
        self.assert_fails("wiki/L.md:13", "wikilink [[Nowhere]] resolves to no file", "wiki/L.md")

    def test_a_missing_heading_fails(self):
        self.write("wiki/L.md", note("L", "Read [[Other#No Such Section]].\n"))
        self.assert_fails("wiki/L.md:13", "no heading 'No Such Section'", "wiki/L.md")

    def test_a_missing_own_heading_fails(self):
        self.write("wiki/L.md", note("L", "## Here\n\n[[#There]]\n"))
        self.assert_fails("wiki/L.md:15", "no heading 'There'", "wiki/L.md")

    def test_an_ambiguous_name_fails(self):
        self.write("wiki/a/Twin.md", note("Twin"))
        self.write("wiki/b/Twin.md", note("Twin"))
        self.write("wiki/L.md", note("L", "[[Twin]]\n"))
        self.assert_fails("wiki/L.md:13", "ambiguous", "wiki/L.md")

    def test_a_path_outside_the_vault_fails(self):
        self.write("wiki/L.md", note("L", "[[docs/memory/MEASUREMENTS]]\n"))
        self.assert_fails("wiki/L.md:13", "resolves to no file", "wiki/L.md")

    def test_every_obsidian_form_passes(self):
        self.write("wiki/memory/diagram.svg", "<svg/>")
        body = """\
            ## Local

            [[Other]], [[other]] (case), [[Other|alias]], [[Other#Section Two]],
            [[Other#section two|alias]], [[memory/Other]], [[Home#Home]], [[#Local]],
            [[Other#^block-id]], ![[diagram.svg]], ![[Other]].

            | a | b |
            |---|---|
            | [[Other\\|in a table]] | [[Other#Section Two\\|x]] |

            Not links: `[[Nowhere]]`, %%[[Hidden]]%%.

            ```
            [[Nowhere]]
            ```
            """
        self.write("wiki/L.md", note("L", body))
        self.assert_clean("wiki/L.md")


class Links(DoclintCase):
    def test_a_missing_relative_target_fails(self):
        self.write("docs/memory/A.md", "# A\n\nSee [B](B.md).\n")
        self.assert_fails("docs/memory/A.md:3", "link target 'B.md' does not exist", "docs")

    def test_a_missing_target_in_the_wiki_fails(self):
        self.write("wiki/L.md", note("L", "Code: [region](../src/region.c).\n"))
        self.assert_fails("wiki/L.md:13", "'../src/region.c' does not exist", "wiki/L.md")

    def test_a_missing_anchor_fails(self):
        self.write("docs/memory/A.md", "# A\n\n[m](MEASUREMENTS.md#granule-decommit)\n")
        self.assert_fails("docs/memory/A.md:3", "'#granule-decommit' names no heading", "docs")

    def test_a_missing_own_anchor_fails(self):
        self.write("README.md", "# Project\n\n## Usage\n\n[up](#usages)\n")
        self.assert_fails("README.md:5", "'#usages' names no heading of README.md", "README.md")

    def test_a_target_outside_the_repository_fails(self):
        self.write("docs/A.md", "[design](../../shared/DESIGN.md)\n")
        self.assert_fails("docs/A.md:1", "outside the repository", "docs/A.md")

    def test_an_absolute_target_fails(self):
        self.write("docs/A.md", "[readme](/README.md)\n")
        self.assert_fails("docs/A.md:1", "absolute link target", "docs/A.md")

    def test_a_link_spanning_lines_is_reported_where_it_starts(self):
        self.write("docs/A.md", "para\ntext [a long\nlabel](nope.md) end\n")
        self.assert_fails("docs/A.md:2", "'nope.md' does not exist", "docs/A.md")

    def test_a_broken_reference_definition_fails(self):
        self.write("docs/A.md", "[x][m]\n\n[m]: gone.md\n")
        self.assert_fails("docs/A.md:3", "'gone.md' does not exist", "docs/A.md")

    def test_good_links_pass(self):
        self.write("docs/memory/pic one.svg", "<svg/>")
        self.write("src/region.c", "")
        body = """\
            # A

            ## The main job: replay (of 2 traces)

            ## Repeat
            ## Repeat

            [m](MEASUREMENTS.md#granule-commit), [c](MEASUREMENTS.md#Cost%20of%20accounting),
            [self](#the-main-job-replay-of-2-traces), [twice](#repeat-1), [dir](../memory),
            [code](../../src/region.c), ![pic](<pic one.svg>), ![pic](pic%20one.svg "title"),
            [web](https://example.com/x.md), [mail](mailto:a@b.c), `[code](nope.md)`.

            ```
            [fenced](nope.md)
            ```

            [ref]: ../../README.md
            """
        self.write("docs/memory/A.md", body)
        self.write("wiki/L.md", note("L", "[a](../docs/memory/A.md#Repeat), [h](../README.md)\n"))
        self.assert_clean("docs", "wiki/L.md")


class Fences(DoclintCase):
    def test_an_unclosed_backtick_fence_fails(self):
        self.write("docs/A.md", "# A\n\n```sh\nmake\n")
        self.assert_fails("docs/A.md:3", "never closed", "docs/A.md")

    def test_an_unclosed_tilde_fence_fails(self):
        self.write("wiki/L.md", note("L", "~~~\ncode\n```\n"))
        self.assert_fails("wiki/L.md:13", "never closed", "wiki/L.md")

    def test_a_shorter_closing_fence_does_not_close(self):
        self.write("docs/A.md", "````md\n```\ninner\n```\n")
        self.assert_fails("docs/A.md:1", "never closed", "docs/A.md")

    def test_a_fence_left_open_in_a_callout_fails(self):
        self.write("wiki/L.md", note("L", "> [!note]\n> ```mermaid\n> graph LR\n\nafter\n"))
        self.assert_fails("wiki/L.md:14", "not closed before its blockquote or callout ends",
                          "wiki/L.md")

    def test_closed_fences_pass(self):
        body = """\
            ```sh
            echo 1.5x [x](nope.md)
            ```

            ~~~~
            ```
            ~~~~

            > [!example]
            > ```mermaid
            > graph LR
            > ```

            - item

              ```c
              int x;
              ```
            """
        self.write("docs/A.md", body)
        self.write("wiki/L.md", note("L", body))
        self.assert_clean("docs/A.md", "wiki/L.md")


class Measurements(DoclintCase):
    def test_each_unit_without_a_reference_fails(self):
        for text, number in (("commit takes 348 µs", "348 µs"), ("commit takes 348 us", "348 us"),
                             ("a replay takes 2.23 ms", "2.23 ms"), ("the suite runs in 39 s", "39 s"),
                             ("copies at 53 GB/s", "53 GB/s"), ("2.08 TB/s device copy", "2.08 TB/s"),
                             ("decode at 1,200 tok/s", "1,200 tok/s"), ("pooled is 1.5× faster", "1.5×"),
                             ("pooled is 10x faster", "10x"), ("a 12.5\u00a0µs create", "12.5\u00a0µs")):
            with self.subTest(unit=number):
                self.write("docs/memory/A.md", "# A\n\nIntro.\n\n%s.\n" % text)
                self.assert_fails("docs/memory/A.md:5", "performance number '%s'" % number, "docs")

    def test_the_readme_is_checked_too(self):
        self.write("README.md", "# P\n\nThe default run takes about 5 s.\n")
        self.assert_fails("README.md:3", "'5 s' has no MEASUREMENTS.md reference", "README.md")

    def test_a_reference_in_another_paragraph_does_not_count(self):
        self.write("docs/A.md", "Measured: [m](memory/MEASUREMENTS.md).\n\nIt takes 348 µs.\n")
        self.assert_fails("docs/A.md:3", "'348 µs'", "docs/A.md")

    def test_a_reference_in_another_table_row_does_not_count(self):
        self.write("docs/A.md", "| a | b |\n|---|---|\n| x | [m](memory/MEASUREMENTS.md) |\n| y | 348 µs |\n")
        self.assert_fails("docs/A.md:4", "'348 µs'", "docs/A.md")

    def test_a_reference_in_another_list_item_does_not_count(self):
        self.write("docs/A.md", "- [m](memory/MEASUREMENTS.md)\n- 348 µs\n")
        self.assert_fails("docs/A.md:2", "'348 µs'", "docs/A.md")

    def test_a_link_to_another_file_is_not_a_reference(self):
        self.write("docs/B.md", "# B\n")
        self.write("docs/A.md", "It takes 348 µs ([b](B.md)).\n")
        self.assert_fails("docs/A.md:1", "'348 µs'", "docs/A.md")

    def test_an_empty_not_measured_marker_does_not_count(self):
        self.write("docs/A.md", "At most 1.5× the floor. <!-- doclint: not-measured -->\n")
        self.assert_fails("docs/A.md:1", "'1.5×'", "docs/A.md")

    def test_references_that_count_pass(self):
        body = """\
            # A

            Pooled commit: 348 µs ([MEASUREMENTS](MEASUREMENTS.md#granule-commit)).

            Accounting adds 0.04 µs per cycle,
            which the governed run shows
            ([MEASUREMENTS.md](MEASUREMENTS.md#cost-of-accounting)).

            | variant | time | source |
            |---|---|---|
            | pooled | 348 µs, 0.81× mmap | [entry](MEASUREMENTS.md#granule-commit) |

            - set access: 34 µs per granule on the H200, the anchor's (`../shared/DESIGN.md`, section 3)
            - a copy at 2.08 TB/s (anchor, DESIGN.md §3)
            - target: at most 1.5× the raw floor <!-- doclint: not-measured the issue's target -->

            Not numbers with units: 4 × n granules, 2x2 tiles, 0x1f, 10 × 256 bytes,
            x86_64, 2 MiB, 13.2%, `348 µs` in code, ids like r1.5x.

            ```
            348 µs 10x
            ```
            """
        self.write("docs/memory/A.md", body)
        self.assert_clean("docs")

    def test_measurements_itself_and_the_wiki_are_exempt(self):
        self.write("wiki/L.md", note("L", "A commit takes 348 µs.\n"))
        self.assert_clean("docs/memory/MEASUREMENTS.md", "wiki/L.md")


if __name__ == "__main__":
    unittest.main()

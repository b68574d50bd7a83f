#!/usr/bin/env bash
# test_doc_refs.sh — the docs hold together: every "§N" or "§N.M" cited in README.md, docs/ and
# src/ names a section of docs/design.md ("## N." / "### N.M"), every relative Markdown link of
# README.md and docs/ points at a file that exists (and at a heading of it, where it names one:
# #anchor as GitHub makes them), and README.md stays a short front door (at most 200 lines; the
# reference lives in docs/).
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
/usr/bin/python3 - <<'PY'
import glob, os, re, sys
design = open("docs/design.md").read()
sections = set(re.findall(r"^##+ (\d+(?:\.\d+)*)\.? ", design, re.M))
files = ["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(
    p for p in glob.glob("src/**/*", recursive=True) if os.path.isfile(p) and p.endswith((".c", ".h", ".cu", ".md")))
# GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as "-"
def slugs(path):
    heads = re.findall(r"^#+ (.*)$", open(path, encoding="utf-8").read(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}
bad = []
for p in files:
    for n, line in enumerate(open(p, encoding="utf-8", errors="replace"), 1):
        for ref in re.findall(r"§(\d+(?:\.\d+)*)", line):
            if ref not in sections:
                bad.append(f"{p}:{n}: §{ref} is not a section of docs/design.md")
        if p.endswith(".md"):
            for link, anchor in re.findall(r"\]\(([^)#:]+)(?:#([^)]*))?\)", line):
                target = os.path.join(os.path.dirname(p), link)
                if not os.path.exists(target):
                    bad.append(f"{p}:{n}: link {link} does not exist")
                elif anchor and target.endswith(".md") and anchor not in slugs(target):
                    bad.append(f"{p}:{n}: link {link}#{anchor}: no such heading there")
lines = sum(1 for _ in open("README.md"))
if lines > 200:
    bad.append(f"README.md has {lines} lines (at most 200)")
for b in bad:
    print("FAIL " + b)
print(f"{len(files)} files, sections {sorted(sections)}, README {lines} lines: " + ("ok" if not bad else f"{len(bad)} problems"))
sys.exit(1 if bad else 0)
PY

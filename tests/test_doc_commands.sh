#!/usr/bin/env bash
# test_doc_commands.sh — the commands README.md and docs/ show exist and run as written, so the
# docs cannot drift from the binary again:
# - every `ted CMD ...` (or build/ted) in a code span or an indented code line names a command of
#   `ted --help`, and every --flag after it is in `ted CMD --help` (bench takes train's flags too);
#   a code span of flags alone (`--overlap-comm`) names flags of some ted command (or mpirun's);
#   every `make TARGET` is a target of the Makefile;
# - every complete `ted train` line (no placeholder, no checkpoint to read, no GPU) passes ted
#   train's own checks: it is run as written with --dry-run (and --ranks N under mpirun -np N);
# - the README's "Use" block runs, line after line, in a scratch folder holding build/, configs/
#   and data/ as the README expects, with flags appended that only make it short (--steps 2,
#   --eval-windows 4, --windows 4, --tokens 8: a later flag overrides); lines with "..." and the
#   --device cuda line are checked by the flags alone.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
mkdir -p "$W/build" && ln -s "$TED" "$W/build/ted"
for d in configs scripts; do ln -s "$TED_ROOT/$d" "$W/$d"; done
mkdir -p "$W/data" && ln -s "$TED_ROOT/data/moby-dick.txt" "$TED_ROOT/data/gpt2" "$W/data/"   # written in W only
TED_ROOT="$TED_ROOT" W="$W" /usr/bin/python3 - <<'PY'
import glob, os, re, shlex, subprocess, sys
root, work, ted = os.environ["TED_ROOT"], os.environ["W"], os.environ["TED"]
bad, ran = [], 0
def run(argv, cwd=work, timeout=600):
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace",
                       timeout=timeout)
    return r.returncode, r.stdout + r.stderr
top = run([ted, "--help"])[1]
commands = re.findall(r"^  ([a-z]+) {2,}", top, re.M)
helps = {c: run([ted, c, "--help"]) for c in commands}
helps["bench"] = (helps["bench"][0], helps["bench"][1] + helps["train"][1])
for c, (rc, _) in helps.items():
    if rc != 0:
        bad.append(f"ted {c} --help exits {rc}")
every_help = "".join(h for _, h in helps.values())
mpirun_flags = {"--allow-run-as-root", "--oversubscribe", "--map-by", "--mca", "--bind-to", "--hostfile", "--tune"}
targets = set(re.findall(r"^([\w-]+):", open(os.path.join(root, "Makefile")).read(), re.M))

def pieces(path):
    """(line number, code) for each code span and each indented code line, continuations joined"""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        n, line = i + 1, lines[i]
        if line.startswith("    "):
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            yield n, line.strip(), True
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield n, span, False
        i += 1

def ted_words(code):
    """the words after `ted` up to the end of that command (a pipe, ;, &&, a redirection, a comment)"""
    words = code.split()
    for k, w in enumerate(words):
        if w in ("ted", "build/ted", "./build/ted") and k + 1 < len(words):
            rest = []
            for x in words[k + 1:]:
                if x in ("|", ";", "&&", "||", "#") or x.startswith((">", "2>")):
                    break
                rest.append(x)
            yield rest

files = ["README.md"] + sorted(glob.glob("docs/*.md"))
checked = 0
dry = []
for p in files:
    for n, code, block in pieces(p):
        for rest in ted_words(code):
            cmd = rest[0]
            if cmd.startswith("-"):
                if cmd not in ("--help", "-h", "--version", "-V"):
                    bad.append(f"{p}:{n}: ted {cmd}: not an option of ted")
                continue
            if cmd not in commands:
                bad.append(f"{p}:{n}: ted {cmd}: no such command")
                continue
            for w in rest[1:]:
                flag = w.strip("[]()`,'\"").split("=")[0]
                if not re.fullmatch(r"--[a-z][\w-]*", flag):
                    continue
                checked += 1
                if not re.search(re.escape(flag) + r"(?![\w-])", helps[cmd][1]):
                    bad.append(f"{p}:{n}: ted {cmd} {flag}: not in ted {cmd} --help")
            if cmd == "train" and block:
                dry.append((p, n, code))
        if code.startswith("--"):   # flags on their own: some ted command's, or mpirun's
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", code):
                checked += 1
                if flag not in mpirun_flags and not re.search(re.escape(flag) + r"(?![\w-])", every_help):
                    bad.append(f"{p}:{n}: {flag}: not a flag of any ted command")
        for t in re.findall(r"(?:^|\s)make ([a-z][\w-]*)", code):
            if t not in targets:
                bad.append(f"{p}:{n}: make {t}: no such target in the Makefile")
print(f"{checked} flags of ted commands in {len(files)} files checked against --help")

# every complete train line of a code block, as written, through ted train's checks
placeholder = re.compile(r"\.\.\.|…|--resume|--init-from|--device|\bmodel\.json|corpus|[A-Z]{3,}")
skipped = 0
for p, n, code in dry:
    if placeholder.search(code.split("build/ted", 1)[-1]):
        skipped += 1
        continue
    argv = shlex.split(code, comments=True)
    np_ = 1
    if argv[0] in ("mpirun", "mpiexec"):
        np_ = int(argv[argv.index("-np") + 1])
        argv = argv[argv.index("build/ted"):]
    argv += ["--dry-run"] + (["--ranks", str(np_)] if np_ > 1 else [])
    rc, out = run(argv)
    ran += 1
    print(("ok   " if rc == 0 else "FAIL ") + f"{p}:{n}: " + " ".join(argv))
    if rc != 0 or "ted train accepts this run" not in out:
        bad.append(f"{p}:{n}: {' '.join(argv)}: exit {rc}: {out.strip().splitlines()[-1:]}")
print(f"{ran} train lines of the docs passed ted train --dry-run ({skipped} with placeholders or checkpoints)")

# the README's Use block, line after line
readme = open("README.md").read()
use = readme.split("## Use", 1)[1].split("\n## ", 1)[0]
with open(os.path.join(work, "a.txt"), "w") as f: f.write("Call me Ishmael. " * 40)
with open(os.path.join(work, "b.txt"), "w") as f: f.write("Some years ago, never mind how long. " * 40)
with open(os.path.join(work, "docs.jsonl"), "w") as f: f.write('{"text": "It is a way I have."}\n' * 20)
short = {"train": ["--steps", "2", "--eval-windows", "4"], "eval": ["--windows", "4"],
         "generate": ["--tokens", "8"], "bench": ["--steps", "1"]}
for line in use.split("\n"):
    if not line.startswith("    ") or "..." in line:
        continue
    argv = shlex.split(line, comments=True)
    if argv[0] == "build/ted":
        extra = list(short.get(argv[1], []))
        if "--resume" in argv:
            extra[1] = "3"     # a resumed run goes on past the first one's 2 steps
        if argv[1:3] == ["bench", "--optimizer"]:
            extra = []
        argv += extra
    elif argv[0] == "make":
        argv = ["make", "--no-print-directory", "-f", os.path.join(root, "Makefile")] + argv[1:]
    rc, out = run(argv)
    ran += 1
    print(("ok   " if rc == 0 else "FAIL ") + " ".join(argv))
    if rc != 0:
        bad.append(f"README.md Use: {line.strip()}: exit {rc}: {out.strip().splitlines()[-3:]}")
for b in bad:
    print("FAIL " + b)
print(f"{ran} commands run: " + ("ok" if not bad else f"{len(bad)} problems"))
sys.exit(1 if bad else 0)
PY

#!/usr/bin/env bash
# test_monitor.sh — live metrics read back independently:
#  - DeepSpeed's "tensorboard" section (output_path/job_name) and Megatron's --tensorboard-dir write
#    an event file that a reader written here from the documented format parses: each record's
#    length and data checked against their masked CRC-32C (computed here, table-free), each data an
#    `Event` decoded by Debian's python3-protobuf from a descriptor built here from the format; the
#    first event's file_version is "brain.Event:2"; the scalars (loss, lm and aux loss, lr, grad
#    norm, tokens/s, MFU, dropped fraction, loss scale, each MoE block's load, val loss) equal the
#    --log JSON lines of the same run, step by step
#  - on 2 ranks (dp 2) the file also holds each collective's ms, and its losses equal the one-process
#    run's (same global batch) within 1e-5; only rank 0 writes
#  - csv_monitor: one <tag>.csv per metric, "step,<tag>" then the same values
# Environment (from CTest): TED, TED_ROOT, TED_TMP.
source "${TED_ROOT:?}/tests/lib.sh"
set +e   # the checks below count failures and go on
source tests/mpi_env.sh
PY=/usr/bin/python3
if ! "$PY" -c 'import google.protobuf' 2>/dev/null; then
  echo "SKIPPED: python3-protobuf is not installed (bash scripts/setup.sh installs it)"; exit 77
fi
M=(--data data/moby-dick.txt --n-layer 2 --n-embd 32 --n-head 4 --n-positions 32 --num-experts 4 --top-k 2
   --moe-every 1 --steps 5 --eval-every 5 --eval-windows 4 --log-every 0 --data-order sequential)
cat >"$W/ds.json" <<JSON
{"tensorboard": {"enabled": true, "output_path": "$W/tb", "job_name": "one"},
 "csv_monitor": {"enabled": true, "output_path": "$W/csv", "job_name": "one"}}
JSON
OMP_NUM_THREADS=1 "$TED" train "${M[@]}" --micro-batch 8 --config "$W/ds.json" --log "$W/one.jsonl" >"$W/one.out" 2>&1 ||
  { tail -3 "$W/one.out"; echo "FAIL: one process"; exit 1; }
"${MPIRUN[@]}" -np 2 env OMP_NUM_THREADS=1 "$TED" train "${M[@]}" --micro-batch 4 --tensorboard-dir "$W/tb2" \
  --log "$W/two.jsonl" >"$W/two.out" 2>&1 || { tail -3 "$W/two.out"; echo "FAIL: two ranks"; exit 1; }
"$PY" - "$W" <<'PY'
import glob, json, struct, sys
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
W = sys.argv[1]

# CRC-32C written from its definition (reflected 0x82F63B78), bit by bit, and TensorBoard's mask
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

# Event, Summary and Summary.Value from the format (field numbers and types of event.proto / summary.proto)
F = descriptor_pb2.FieldDescriptorProto
fd = descriptor_pb2.FileDescriptorProto(name="ev.proto", package="tb")
def msg(name, fields):
    m = fd.message_type.add(name=name)
    for fname, num, ftype, label, tname in fields:
        f = m.field.add(name=fname, number=num, type=ftype, label=label)
        if tname: f.type_name = tname
msg("Value", [("tag", 1, F.TYPE_STRING, F.LABEL_OPTIONAL, None), ("simple_value", 2, F.TYPE_FLOAT, F.LABEL_OPTIONAL, None)])
msg("Summary", [("value", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tb.Value")])
msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, F.LABEL_OPTIONAL, None), ("step", 2, F.TYPE_INT64, F.LABEL_OPTIONAL, None),
              ("file_version", 3, F.TYPE_STRING, F.LABEL_OPTIONAL, None),
              ("summary", 5, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".tb.Summary")])
pool = descriptor_pool.DescriptorPool()
pool.Add(fd)
desc = pool.FindMessageTypeByName("tb.Event")
Event = message_factory.GetMessageClass(desc) if hasattr(message_factory, "GetMessageClass") \
    else message_factory.MessageFactory(pool).GetPrototype(desc)

def read_events(path):
    raw, at, out = open(path, "rb").read(), 0, []
    while at < len(raw):
        head = raw[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", raw[at + 8:at + 12])
        assert hc == masked(head), f"{path}: length CRC at {at}"
        data = raw[at + 12:at + 12 + n]
        (dc,) = struct.unpack("<I", raw[at + 12 + n:at + 16 + n])
        assert len(data) == n and dc == masked(data), f"{path}: data CRC at {at}"
        e = Event()
        e.ParseFromString(data)
        out.append(e)
        at += 16 + n
    return out

def scalars(path):
    ev = read_events(path)
    assert ev[0].file_version == "brain.Event:2", ev[0]
    got = {}
    for e in ev[1:]:
        for v in e.summary.value:
            got[(v.tag, e.step)] = v.simple_value
    return got

fails = 0
def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond

files = glob.glob(f"{W}/tb/one/events.out.tfevents.*")
check(len(files) == 1, f"tensorboard.output_path/job_name holds one event file: {files}")
tb = scalars(files[0])
log = [json.loads(l) for l in open(f"{W}/one.jsonl")]
keys = {"Train/loss": "loss", "Train/lm_loss": "lm_loss", "Train/aux_loss": "aux_loss", "Train/lr": "lr",
        "Train/grad_norm": "grad_norm", "Train/tokens_per_s": "tokens_per_s", "Train/mfu": "mfu",
        "Train/dropped_frac": "dropped_frac", "Train/loss_scale": "loss_scale"}
n = 0
for o in log:
    if "loss" in o and "step" in o:
        for tag, k in keys.items():
            want, got = o[k], tb.get((tag, o["step"]))
            ok = got is not None and abs(got - want) <= 1e-6 * max(1.0, abs(want))
            n += ok
            if not ok: check(False, f"{tag} step {o['step']}: {got} vs log {want}")
        for blk in o["moe"]:
            got = tb.get((f"MoE/block_{blk['layer']}_load", o["step"]))
            check(got is not None and abs(got - blk["max_mean"]) < 1e-4, f"MoE block {blk['layer']} load step {o['step']}")
    if "val_loss" in o:
        got = tb.get(("Eval/val_loss", o["step"]))
        check(got is not None and abs(got - o["val_loss"]) < 1e-6 * o["val_loss"], f"val_loss step {o['step']}: {got}")
check(n == 5 * len(keys), f"{n} step scalars equal the --log lines (5 steps x {len(keys)} tags)")
# csv_monitor
rows = [l.strip().split(",") for l in open(f"{W}/csv/one/Train_loss.csv")]
check(rows[0] == ["step", "Train/loss"] and len(rows) == 6, f"csv_monitor Train_loss.csv header and rows: {rows[:2]}")
check(all(abs(float(v) - tb[("Train/loss", int(s))]) < 1e-6 for s, v in rows[1:]), "csv values equal the event file's")
# two ranks: rank 0 alone writes; collectives; the losses equal one process's
files2 = glob.glob(f"{W}/tb2/events.out.tfevents.*")
check(len(files2) == 1, f"--tensorboard-dir on 2 ranks: one event file ({len(files2)})")
tb2 = scalars(files2[0])
comm = sorted({t for t, _ in tb2 if t.startswith("Comm/")})
check(len(comm) > 0 and all(tb2[(t, 5)] >= 0 for t in comm if (t, 5) in tb2), f"collective ms tags: {comm}")
worst = max(abs(tb2[("Train/loss", s)] - tb[("Train/loss", s)]) / tb[("Train/loss", s)] for s in range(1, 6))
check(worst < 1e-5, f"dp 2 losses = one process's within {worst:.1e}")
sys.exit(1 if fails else 0)
PY

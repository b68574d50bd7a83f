// commands.h — `ted <command>`: each command parses its options, calls the rooms below and
// reports (cli/main.c dispatches). Each returns the process's exit code (TED_EXIT_USAGE for bad
// input, after one line).
#pragma once

// ted train: a training run (run/run.h) around the trainer's steps (run/trainer.h).
int cmd_train(int argc, char **argv);
// ted eval: the mean loss of a checkpoint over windows of a split.
int cmd_eval(int argc, char **argv);
// ted generate: text sampled from a checkpoint.
int cmd_generate(int argc, char **argv);
// ted bench: the trainer's steps of the benchmark model on random tokens, timed.
int cmd_bench(int argc, char **argv);
// ted plan: the memory model of design §5 (M1, M2) and of model/memplan.h: model-state bytes
// per GPU under TED with ZeRO stage 0, 1 or 2 (and offload), activations, the largest base
// model that fits. `ted plan --base-params N --experts E --gpus G [...]` or `--config FILE --gpus G`.
int cmd_plan(int argc, char **argv);
// ted compare A.jsonl B.jsonl: the first step, and in it the first value, where two training logs
// part — the step's losses, each MoE block's tokens per expert, then each tensor's gradient norm
// (--log-tensors lines), in the order of A. Exit 0: no divergence within the tolerance; 1: they
// part (one line says where); 2: bad input.
int cmd_compare(int argc, char **argv);
// ted tune: the best layouts of a model on a cluster, by the performance model.
int cmd_tune(int argc, char **argv);
// ted upcycle --load DENSE --num-experts E [--top-k K] [--granularity G] --save DIR: parses and
// reports; the work is io/upcycle.
int cmd_upcycle(int argc, char **argv);

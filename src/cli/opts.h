// opts.h — the options of the small commands (eval, generate, bench, upcycle): "--name value"
// or "--name=value" pairs, numbers in a range, --help. Each error is one line naming the
// command and the option. (`ted train`'s flags are config/flags.c's table.)
#pragma once

typedef struct {
    const char *name;
    const char **val;
} Opt;

// Parses argv[1..] into opts[n]; 0 or -1 after one line.
int opts_parse(int argc, char **argv, Opt *opts, int n, const char *cmd);
// An integer in [lo, hi]; 0 or -1 after one line.
int opts_long(const char *cmd, const char *name, const char *s, long lo, long hi, long *out);
// A number >= lo; 0 or -1 after one line.
int opts_float(const char *cmd, const char *name, const char *s, double lo, double *out);
// Whether argv holds --help or -h.
int opts_help(int argc, char **argv);
// Whether argv holds flag `name` ("--name value" or "--name=value"); *val: the value of its
// last occurrence (NULL when it has none).
int opts_find(int argc, char **argv, const char *name, const char **val);

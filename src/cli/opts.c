// opts.c — the small commands' options (see opts.h).
#include "cli/opts.h"
#include "config/config.h"
#include "core/util.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int opts_parse(int argc, char **argv, Opt *opts, int n, const char *cmd) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int k = 0;
        while (k < n && (strlen(opts[k].name) != len || strncmp(a, opts[k].name, len))) k++;
        if (k == n) {
            ted_error("%s: unknown option %s (see ted %s --help)", cmd, a, cmd);
            return -1;
        }
        if (eq) *opts[k].val = eq + 1;
        else if (i + 1 < argc) *opts[k].val = argv[++i];
        else {
            ted_error("%s: %s needs a value", cmd, a);
            return -1;
        }
    }
    return 0;
}

int opts_long(const char *cmd, const char *name, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        ted_error("%s: %s must be an integer in [%ld, %ld], got \"%s\"", cmd, name, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int opts_float(const char *cmd, const char *name, const char *s, double lo, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo)) {
        ted_error("%s: %s must be a number >= %g, got \"%s\"", cmd, name, lo, s);
        return -1;
    }
    *out = v;
    return 0;
}

int opts_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

int opts_find(int argc, char **argv, const char *name, const char **val) {
    const char *v = config_flag_value(argc, argv, name);
    if (!v) return 0;
    *val = v[0] ? v : NULL;
    return 1;
}

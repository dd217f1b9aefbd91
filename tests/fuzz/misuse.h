/*
 * misuse.h -- what the misuse ops share (ops_misuse*.c): foreign values,
 * and the STRICT check of a call that must fail and change nothing.
 */
#ifndef SW_FUZZ_MISUSE_H
#define SW_FUZZ_MISUSE_H

#include "model.h"

/* Something to point at that is no handle of any kind. */
extern int fz_static_var;

/* A value that is certainly not a live handle of `kind` (0 buffer,
 * 1 lease, 2 queue, 3 event, 4 scope), and not NULL. */
void *fz_foreign(fz_engine *e, fz_src *s, int kind);
/* A value that is not a device handle. */
sw_device *fz_foreign_device(fz_engine *e, fz_src *s);

/* The call must fail with code and change nothing at all. */
#define STRICT(name, code, expr)                                              \
    do {                                                                      \
        fz_snapshot snap_;                                                    \
        fz_snapshot_take(e, &snap_);                                          \
        int rc_ = (expr);                                                     \
        fz_result(e, name, rc_, FZ_ERR, code, &snap_);                        \
    } while (0)

#define OUT_NULL(p, name)                                                     \
    do {                                                                      \
        if ((p) != NULL)                                                      \
            fz_fail(e->w, e, "a failed %s left its out-parameter set", name); \
    } while (0)

/* The sub-families (each false when it had nothing to do). */
bool fz_misuse_buffer(fz_engine *e, fz_src *s);
bool fz_misuse_nulls(fz_engine *e, fz_src *s);
bool fz_misuse_ranges(fz_engine *e, fz_src *s);
bool fz_misuse_dtypes(fz_engine *e, fz_src *s);
bool fz_misuse_misalign(fz_engine *e, fz_src *s);
bool fz_misuse_patterns(fz_engine *e, fz_src *s);
bool fz_misuse_wrong_device(fz_engine *e, fz_src *s);
bool fz_misuse_unmatched_end(fz_engine *e, fz_src *s);
bool fz_misuse_handles(fz_engine *e, fz_src *s);
bool fz_misuse_callbacks(fz_engine *e, fz_src *s);
bool fz_misuse_faults(fz_engine *e, fz_src *s);
bool fz_misuse_devices(fz_engine *e, fz_src *s);
bool fz_misuse_misc(fz_engine *e, fz_src *s);

#endif

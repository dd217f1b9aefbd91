/*
 * ops_fault.c -- injected faults: SW_FAULT_ALLOC, SW_FAULT_COPY,
 * SW_FAULT_DISK (the spill file of a host budget) and SW_FAULT_HOST_ALLOC
 * (per device, or the thread's own with no device),
 * one-shot or persistent, armed for exactly the next step and disarmed
 * before its check.  Any call of that step may then fail with OOM,
 * HOST_OOM or DEVICE, and a failed call must have changed nothing
 * (fz_result, and the check after the step).
 *
 * Device faults are the device's, not the thread's: the threaded variant
 * arms only the thread's own no-device host-allocation fault.
 */
#include "model.h"

#include <stdio.h>

bool fz_op_fault(fz_engine *e, fz_src *s, unsigned k)
{
    (void)k;
    fz_disarm(e); /* two in a row: the later one wins */
    uint8_t t = fz_u8(s);
    int d = -1;
    sw_fault_op op = SW_FAULT_HOST_ALLOC;
    if (e->w->faults && t % 4 != 3) {
        d = fz_pick_dev(e, s);
        op = (sw_fault_op)((t >> 2) % 4);
    }
    uint64_t nth = fz_u8(s) < 128 ? 1 : 1 + fz_below(s, 8);
    int persistent = fz_u8(s) & 1;
    static const char *const names[] = {"ALLOC", "COPY", "HOST_ALLOC",
                                        "DISK"};
    fz_note(e, "arm fault %s nth %llu%s on %s", names[op],
            (unsigned long long)nth, persistent ? " persistent" : "",
            d >= 0 ? e->w->spec[d] : "this thread");
    int rc = sw_inject_fault(d >= 0 ? e->w->dev[d] : NULL, op, nth,
                             persistent);
    if (rc != SW_OK)
        fz_fail(e->w, e, "sw_inject_fault: %s", fz_err(rc));
    e->fault_armed = true;
    e->fault_dev = d;
    e->fault_op = op;
    atomic_fetch_add(&e->w->stats.faults_armed, 1);
    return false;
}

/*
 * ops_misuse_objects.c -- misuse, objects: released and foreign leases,
 * events, queues and scopes; the pressure-callback table; fault injection
 * and wraps with bad arguments; devices (bad specs, foreign handles,
 * closing one in use).
 */
#include "misuse.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A live buffer handle slot (any), or -1. */
static int live_buf(fz_engine *e, fz_src *s)
{
    return fz_pick_buf(e, s, false);
}

/* ------------------------------------------------------------------------
 * Leases, events, queues, scopes: released and foreign handles
 * ---------------------------------------------------------------------- */

bool fz_misuse_handles(fz_engine *e, fz_src *s)
{
    const int H = SW_ERR_INVALID_HANDLE;
    uint8_t k = fz_u8(s) % 14;
    fz_note(e, "misuse: released/foreign lease, event, queue or scope (%u)",
            k);
    switch (k) {
    case 0: STRICT("sw_lease_release", H,
                   sw_lease_release(fz_foreign(e, s, 1)));
        break;
    case 1: {
        int done = 4;
        STRICT("sw_event_query", H, sw_event_query(fz_foreign(e, s, 3), &done));
        if (done != 0)
            fz_fail(e->w, e, "a failed sw_event_query left *done set");
        break;
    }
    case 2: STRICT("sw_event_wait", H, sw_event_wait(fz_foreign(e, s, 3)));
        break;
    case 3: STRICT("sw_event_retain", H, sw_event_retain(fz_foreign(e, s, 3)));
        break;
    case 4: STRICT("sw_event_release", H,
                   sw_event_release(fz_foreign(e, s, 3)));
        break;
    case 5: STRICT("sw_queue_release", H,
                   sw_queue_release(fz_foreign(e, s, 2)));
        break;
    case 6: STRICT("sw_queue_retain", H, sw_queue_retain(fz_foreign(e, s, 2)));
        break;
    case 7: STRICT("sw_queue_synchronize", H,
                   sw_queue_synchronize(fz_foreign(e, s, 2)));
        break;
    case 8: {
        sw_event *ev = (sw_event *)&fz_static_var;
        STRICT("sw_queue_record_event", H,
               sw_queue_record_event(fz_foreign(e, s, 2), &ev));
        OUT_NULL(ev, "sw_queue_record_event");
        break;
    }
    case 9: {
        int li = live_buf(e, s);
        sw_scalar v = {.i = 0};
        if (li < 0)
            return false;
        STRICT("sw_op_fill_q(released queue)", H,
               sw_op_fill_q(fz_foreign(e, s, 2), e->buf[li].h, SW_INT32, 0, v));
        break;
    }
    case 10: {
        uint64_t p = 3;
        STRICT("sw_peak_scope_peak", H,
               sw_peak_scope_peak(fz_foreign(e, s, 4), &p));
        if (p != 0)
            fz_fail(e->w, e, "a failed sw_peak_scope_peak left *peak set");
        break;
    }
    case 11: {
        uint64_t p = 3;
        STRICT("sw_peak_scope_end", H, sw_peak_scope_end(fz_foreign(e, s, 4),
                                                         &p));
        if (p != 0)
            fz_fail(e->w, e, "a failed sw_peak_scope_end left *peak set");
        break;
    }
    case 12: {
        /* Not a harmless no-op, unlike closing NULL elsewhere: ending a
         * scope needs one. */
        uint64_t p = 3;
        STRICT("sw_peak_scope_end(NULL)", SW_ERR_INVALID_ARG,
               sw_peak_scope_end(NULL, &p));
        break;
    }
    default: {
        sw_device *d = (sw_device *)&fz_static_var;
        STRICT("sw_queue_device", H, sw_queue_device(fz_foreign(e, s, 2), &d));
        OUT_NULL(d, "sw_queue_device");
        break;
    }
    }
    return true;
}

/* ------------------------------------------------------------------------
 * Callbacks, faults, wraps, devices
 * ---------------------------------------------------------------------- */

static int dummy_cb(sw_device *dev, sw_pressure *p, size_t bytes, void *u)
{
    (void)dev, (void)p, (void)bytes, (void)u;
    return 0;
}

bool fz_misuse_callbacks(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    sw_device *dev = e->w->dev[d];
    const int A = SW_ERR_INVALID_ARG;
    uint8_t k = fz_u8(s) % 4;
    fz_note(e, "misuse: pressure callbacks (%u) on %s", k, e->w->spec[d]);
    switch (k) {
    case 0: STRICT("sw_remove_pressure_callback(out of range)", A,
                   sw_remove_pressure_callback(dev, fz_u8(s) & 1 ? -1 : 99));
        break;
    case 1: {
        int id = 5;
        STRICT("sw_add_pressure_callback(id NULL)", A,
               sw_add_pressure_callback(dev, dummy_cb, NULL, NULL));
        (void)id;
        break;
    }
    default: {
        /* Needs the whole table to itself: one engine only. */
        if (e->w->threaded)
            return false;
        bool used[SW_MAX_PRESSURE_CALLBACKS] = {false};
        for (int j = 0; j < FZ_NCALLBACK; j++)
            if (e->w->cb[d][j].id >= 0)
                used[e->w->cb[d][j].id] = true;
        if (k == 2) {
            int id = (int)fz_below(s, SW_MAX_PRESSURE_CALLBACKS);
            if (used[id])
                return false;
            STRICT("sw_remove_pressure_callback(not registered)", A,
                   sw_remove_pressure_callback(dev, id));
            break;
        }
        /* Fill the table: the one past SW_MAX_PRESSURE_CALLBACKS is
         * refused with BUSY; then take them all back. */
        int ids[SW_MAX_PRESSURE_CALLBACKS], n = 0;
        for (;;) {
            int id = 77;
            int rc = sw_add_pressure_callback(dev, dummy_cb, NULL, &id);
            if (rc != SW_OK) {
                if (rc != SW_ERR_BUSY || id != -1)
                    fz_fail(e->w, e, "adding callback %d: %s id %d", n,
                            fz_err(rc), id);
                break;
            }
            if (n == SW_MAX_PRESSURE_CALLBACKS)
                fz_fail(e->w, e, "more than SW_MAX_PRESSURE_CALLBACKS "
                        "callbacks were registered");
            ids[n++] = id;
        }
        for (int j = 0; j < n; j++)
            if (sw_remove_pressure_callback(dev, ids[j]) != SW_OK)
                fz_fail(e->w, e, "removing dummy callback %d", ids[j]);
        break;
    }
    }
    return true;
}

bool fz_misuse_faults(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    sw_device *dev = e->w->dev[d];
    const int A = SW_ERR_INVALID_ARG;
    uint8_t k = fz_u8(s) % 6;
    fz_note(e, "misuse: faults/wraps (%u) on %s", k, e->w->spec[d]);
    switch (k) {
    case 0: STRICT("sw_inject_fault(bad op)", A,
                   sw_inject_fault(dev, (sw_fault_op)(fz_u8(s) & 1 ? 4 : -1),
                                   1, 0));
        break;
    case 1: STRICT("sw_inject_fault(NULL device, ALLOC)", A,
                   sw_inject_fault(NULL, SW_FAULT_ALLOC, 1, 0));
        break;
    case 2: STRICT("sw_inject_fault(foreign device)",
                   SW_ERR_INVALID_HANDLE,
                   sw_inject_fault(fz_foreign_device(e, s),
                                   SW_FAULT_COPY, 1, 0));
        break;
    case 3: {
        sw_buffer *o = (sw_buffer *)&fz_static_var;
        sw_devmem m = {0, 0};
        STRICT("sw_buffer_wrap(null address)", A,
               sw_buffer_wrap(dev, m, 16, "w", &o));
        OUT_NULL(o, "sw_buffer_wrap");
        break;
    }
    case 4: {
        sw_devmem m = {0, 0};
        STRICT("sw_buffer_wrap(out NULL)", A,
               sw_buffer_wrap(dev, m, 0, "w", NULL));
        break;
    }
    default: {
        sw_buffer *o = (sw_buffer *)&fz_static_var;
        sw_devmem m = {0, 0};
        STRICT("sw_buffer_wrap(NULL device)", A,
               sw_buffer_wrap(NULL, m, 0, "w", &o));
        OUT_NULL(o, "sw_buffer_wrap");
        break;
    }
    }
    return true;
}

bool fz_misuse_devices(fz_engine *e, fz_src *s)
{
    int d = fz_pick_dev(e, s);
    sw_device *dev = e->w->dev[d];
    sw_device *bad = fz_foreign_device(e, s);
    const int H = SW_ERR_INVALID_HANDLE;
    uint8_t k = fz_u8(s) % 10;
    fz_note(e, "misuse: devices (%u)", k);
    switch (k) {
    case 0: {
        /* Asking OpenCL or CUDA for their devices loads their runtimes;
         * PoCL's LLVM then gives the calling thread an alternate signal
         * stack from malloc, which ASan unmaps when the thread ends (a
         * CHECK failure): the threaded variant's threads end, so they ask
         * the sim only. */
        static const char *const specs[] = {"nosuch:0", "sim:63",
                                            "opencl:40", "cuda:17"};
        sw_device *o = (sw_device *)&fz_static_var;
        STRICT("sw_device_open(no such device)", SW_ERR_NO_DEVICE,
               sw_device_open(specs[fz_below(s, e->w->threaded ? 2 : 4)],
                              &o));
        OUT_NULL(o, "sw_device_open");
        break;
    }
    case 1: {
        static const char *const specs[] = {"sim:", "sim:x", "sim:-1",
                                            "sim:0:0"};
        sw_device *o = (sw_device *)&fz_static_var;
        STRICT("sw_device_open(malformed spec)", SW_ERR_INVALID_ARG,
               sw_device_open(specs[fz_below(s, 4)], &o));
        OUT_NULL(o, "sw_device_open");
        break;
    }
    case 2: STRICT("sw_device_open(out NULL)", SW_ERR_INVALID_ARG,
                   sw_device_open("sim:0", NULL));
        break;
    case 3: {
        sw_memory_info m;
        STRICT("sw_memory_info_get(foreign device)", H,
               sw_memory_info_get(bad, &m));
        break;
    }
    case 4: {
        sw_buffer *o = (sw_buffer *)&fz_static_var;
        STRICT("sw_buffer_alloc(foreign device)", H,
               sw_buffer_alloc(bad, 16, NULL, &o));
        OUT_NULL(o, "sw_buffer_alloc");
        break;
    }
    case 5: STRICT("sw_set_memory_budget(foreign device)", H,
                   sw_set_memory_budget(bad, 1));
        if (strcmp(sw_device_name(bad), "(invalid device)") != 0)
            fz_fail(e->w, e, "sw_device_name(foreign) is '%s'",
                    sw_device_name(bad));
        break;
    case 6: STRICT("sw_device_close(foreign device)", H,
                   sw_device_close(bad));
        break;
    case 7: {
        /* Something of ours is live on it: closing our (only) reference
         * is refused and the reference kept. */
        bool live = false;
        if (e->w->threaded) /* another engine may hold a second reference */
            return false;
        for (int a = 0; a < FZ_NALLOC && !live; a++)
            live = e->alloc[a].live && e->alloc[a].devi == d &&
                   e->alloc[a].shared < 0;
        if (!live)
            return false;
        STRICT("sw_device_close with live buffers", SW_ERR_BUSY,
               sw_device_close(dev));
        sw_memory_info m;
        if (sw_memory_info_get(dev, &m) != SW_OK)
            fz_fail(e->w, e, "a device refused to close is not usable");
        break;
    }
    case 8: {
        char buf[8];
        if (!e->w->threaded) /* counts every backend's devices: see 0 */
            STRICT("sw_device_spec_at(past the end)", SW_ERR_NO_DEVICE,
                   sw_device_spec_at(1000, buf, sizeof buf));
        STRICT("sw_device_spec_at(tiny buffer)", SW_ERR_INVALID_ARG,
               sw_device_spec_at(0, buf, 1));
        const char *name = NULL;
        STRICT("sw_backend_info(past the end)", SW_ERR_INVALID_ARG,
               sw_backend_info(99, &name, NULL, NULL, 0));
        break;
    }
    default: {
        /* Sizes and names: pure functions. */
        uint64_t v = 7;
        static const char *const badsz[] = {"", "-1", "12Q", "1e3",
                                            "99999999999999999999"};
        int rc = sw_parse_size(badsz[fz_below(s, 5)], &v);
        if (rc != SW_ERR_INVALID_ARG)
            fz_fail(e->w, e, "sw_parse_size accepted garbage: %s",
                    fz_err(rc));
        if (sw_parse_size("1.5K", &v) != SW_OK || v != 1536)
            fz_fail(e->w, e, "sw_parse_size(1.5K) = %" PRIu64, v);
        char buf[16];
        if (strcmp(sw_format_bytes(1536, buf, sizeof buf), "1.50 KiB") != 0)
            fz_fail(e->w, e, "sw_format_bytes(1536) = '%s'", buf);
        if (strcmp(sw_err_name(-99), "SW_ERR_UNKNOWN") != 0 ||
            sw_strerror(-99) == NULL)
            fz_fail(e->w, e, "an unknown code has a name");
        break;
    }
    }
    return true;
}

/*
 * ordermap.c -- spillway.order_manager: per thread, queues (held by weak
 * reference) to their SequentialOrderManagers (the overview: queue.h).
 *
 * Each thread's map is an object kept in its thread state's dict under the
 * key spillway.order_manager (a singleton, OMapObject), so that it goes
 * with the thread: at thread exit its managers are dropped without
 * waiting.  Only the owning thread changes its table.
 */
#include "queue.h"

typedef struct MapObject MapObject;

/* One key of a thread's map; also the callback of the key's weak
 * reference. */
typedef struct EntryObject {
    PyObject_HEAD
    sw_queue *key;         /* == mgr->q */
    ManagerObject *mgr;    /* strong */
    PyObject *wr;          /* weak reference to the key Queue (callback:
                            * this entry), strong */
    MapObject *map;        /* borrowed; NULL once taken out of it */
    struct EntryObject *dead_next;
    unsigned char dead;    /* the key Queue is gone */
    unsigned char on_list; /* linked on map->dead */
    unsigned char idle;    /* scratch for map_prune */
} EntryObject;

/* One thread's map: an open-addressing table of entries by sw_queue
 * pointer (linear probing, backward-shift deletion), owning a reference to
 * each entry, and the list of entries whose key died. */
struct MapObject {
    PyObject_HEAD
    EntryObject **slots;
    size_t cap; /* 0 or a power of two */
    size_t n;
    EntryObject *dead; /* no references of its own: every entry on it is
                        * in the table */
};

/* The weak references' callbacks run in whichever thread drops a key
 * Queue's last reference, so an entry's dead, on_list, dead_next and map
 * and a map's dead list are shared with that thread: they are read and
 * changed under dead_mu (the GIL, on GIL builds), in short sections that
 * run no Python code and allocate nothing.  The table itself is only ever
 * touched by its own thread. */
static sw_py_mutex dead_mu;

static int entry_dead(EntryObject *e)
{
    SW_PY_LOCK(&dead_mu);
    int dead = e->dead;
    SW_PY_UNLOCK(&dead_mu);
    return dead;
}

static int map_has_dead(MapObject *m)
{
    SW_PY_LOCK(&dead_mu);
    int any = m->dead != NULL;
    SW_PY_UNLOCK(&dead_mu);
    return any;
}

/* spillway.order_manager. */
typedef struct {
    PyObject_HEAD
} OMapObject;

/* ------------------------------------------------------------------------
 * Entries
 * ---------------------------------------------------------------------- */

/* The weak reference's callback: the key Queue is gone.  Any thread, with
 * the GIL; never waits, never allocates. */
static PyObject *Entry_call(EntryObject *e, PyObject *args, PyObject *kwds)
{
    SW_PY_LOCK(&dead_mu);
    e->dead = 1;
    MapObject *m = e->map;
    if (m != NULL && !e->on_list) {
        e->on_list = 1;
        e->dead_next = m->dead;
        m->dead = e;
    }
    SW_PY_UNLOCK(&dead_mu);
    Py_RETURN_NONE;
}

static int Entry_traverse(EntryObject *e, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(e));
    Py_VISIT(e->mgr);
    Py_VISIT(e->wr);
    return 0;
}

/* Only for an entry already out of its map (in a map it is reachable). */
static int Entry_clear(EntryObject *e)
{
    SW_PY_LOCK(&dead_mu);
    e->map = NULL;
    SW_PY_UNLOCK(&dead_mu);
    Py_CLEAR(e->wr);
    Py_CLEAR(e->mgr);
    return 0;
}

static void Entry_dealloc(EntryObject *e)
{
    PyTypeObject *tp = Py_TYPE(e);
    PyObject_GC_UnTrack(e);
    (void)Entry_clear(e);
    tp->tp_free((PyObject *)e);
    Py_DECREF(tp);
}

static PyType_Slot Entry_slots[] = {
    {Py_tp_doc, "An entry of spillway.order_manager (internal)."},
    {Py_tp_call, Entry_call},
    {Py_tp_dealloc, Entry_dealloc},
    {Py_tp_traverse, Entry_traverse},
    {Py_tp_clear, Entry_clear},
    {0, NULL},
};

PyType_Spec sw_py_entry_spec = {
    .name = "spillway._OrderEntry",
    .basicsize = sizeof(EntryObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Entry_slots,
};

/* ------------------------------------------------------------------------
 * One thread's map: the table
 * ---------------------------------------------------------------------- */

static size_t map_home(const MapObject *m, const sw_queue *k)
{
    uint64_t h = (uint64_t)(uintptr_t)k * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 40) & (m->cap - 1);
}

static EntryObject *map_find(const MapObject *m, const sw_queue *k)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = map_home(m, k);; i = (i + 1) & (m->cap - 1)) {
        EntryObject *e = m->slots[i];
        if (e == NULL || e->key == k)
            return e;
    }
}

static void map_place(MapObject *m, EntryObject *e)
{
    size_t i = map_home(m, e->key);
    while (m->slots[i] != NULL)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = e;
}

/* Insert e (taking the caller's reference); -1 without an exception when
 * no memory.  No Python code runs here. */
static int map_insert(MapObject *m, EntryObject *e)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        EntryObject **old = m->slots;
        size_t oldcap = m->cap;
        EntryObject **slots = PyMem_Calloc(cap, sizeof *slots);
        if (slots == NULL)
            return -1;
        m->slots = slots;
        m->cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i] != NULL)
                map_place(m, old[i]);
        PyMem_Free(old);
    }
    map_place(m, e);
    m->n++;
    return 0;
}

/* Take e out of the table (the caller takes over the table's reference).
 * Backward-shift deletion keeps every probe chain unbroken. */
static void map_remove(MapObject *m, EntryObject *e)
{
    size_t mask = m->cap - 1, i = map_home(m, e->key);
    while (m->slots[i] != e)
        i = (i + 1) & mask;
    m->slots[i] = NULL;
    m->n--;
    for (size_t j = (i + 1) & mask; m->slots[j] != NULL; j = (j + 1) & mask) {
        EntryObject *x = m->slots[j];
        size_t home = map_home(m, x->key);
        /* x may move into the hole unless its home lies after the hole. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = x;
            m->slots[j] = NULL;
            i = j;
        }
    }
}

/* Take every entry out of m and drop them, waiting for nothing.  First
 * detach them all (so that no callback links them any more, and no weak
 * reference calls back) without releasing the GIL; only then drop the
 * managers, whose deallocation releases it. */
static void map_drop_all(MapObject *m)
{
    EntryObject **slots = m->slots;
    size_t cap = m->cap;
    m->slots = NULL;
    m->cap = m->n = 0;
    SW_PY_LOCK(&dead_mu);
    m->dead = NULL;
    for (size_t i = 0; i < cap; i++) {
        EntryObject *e = slots[i];
        if (e == NULL)
            continue;
        e->map = NULL;
        e->on_list = 0;
        e->dead_next = NULL;
    }
    SW_PY_UNLOCK(&dead_mu);
    for (size_t i = 0; i < cap; i++)
        if (slots[i] != NULL)
            Py_CLEAR(slots[i]->wr);
    for (size_t i = 0; i < cap; i++)
        Py_XDECREF(slots[i]);
    PyMem_Free(slots);
}

/* Drop the entries whose key died, whose manager is idle and referred to
 * by nothing but the entry.  Never waits: idleness is a query of each
 * event.  Entries still busy stay on the dead list. */
static void map_prune(MapObject *m)
{
    SW_PY_LOCK(&dead_mu);
    EntryObject *list = m->dead;
    m->dead = NULL;
    int any = 0;
    for (EntryObject *e = list; e != NULL; e = e->dead_next) {
        e->idle = e->dead && Py_REFCNT(e->mgr) == 1;
        any |= e->idle;
    }
    SW_PY_UNLOCK(&dead_mu);
    if (any) {
        /* Only this thread changes the table and these entries' fields
         * but `dead` (which a callback can only set, for a re-keyed entry
         * whose new key died: it is kept then, and seen next time). */
        Py_BEGIN_ALLOW_THREADS
        for (EntryObject *e = list; e != NULL; e = e->dead_next)
            if (e->idle)
                e->idle = (unsigned char)sw_py_manager_idle_nogil(e->mgr);
        Py_END_ALLOW_THREADS
    }
    EntryObject *drop = NULL;
    SW_PY_LOCK(&dead_mu);
    while (list != NULL) {
        EntryObject *e = list;
        list = e->dead_next;
        e->dead_next = NULL;
        if (!e->dead) { /* taken over by an equal queue meanwhile */
            e->on_list = 0;
        } else if (e->idle && Py_REFCNT(e->mgr) == 1) {
            map_remove(m, e);
            e->on_list = 0;
            e->map = NULL;
            e->dead_next = drop;
            drop = e;
        } else {
            e->dead_next = m->dead;
            m->dead = e;
        }
    }
    SW_PY_UNLOCK(&dead_mu);
    /* The table is consistent: now deallocation may run (and release the
     * GIL). */
    while (drop != NULL) {
        EntryObject *e = drop;
        drop = e->dead_next;
        e->dead_next = NULL;
        Py_CLEAR(e->wr);
        Py_DECREF(e);
    }
}

/* An entry out of any map, with its weak reference broken. */
static void entry_discard(EntryObject *e)
{
    SW_PY_LOCK(&dead_mu);
    e->map = NULL;
    SW_PY_UNLOCK(&dead_mu);
    Py_CLEAR(e->wr);
    Py_DECREF(e);
}

/* The manager of q in map m (a borrowed reference: the map holds it).
 * Allocations can run the garbage collector and so arbitrary code, which
 * could look up (or clear) this very map: the table is searched again
 * after each of them, and nothing found before is trusted. */
static ManagerObject *map_get(sw_py_state *st, MapObject *m, QueueObject *q)
{
    if (map_has_dead(m))
        map_prune(m);
    for (int tries = 0; tries < 100; tries++) {
        EntryObject *e = map_find(m, q->q);
        if (e != NULL && !entry_dead(e))
            return e->mgr;
        if (e != NULL) {
            /* The key died; the manager stayed (work pending, or referred
             * to elsewhere): this equal queue takes it over. */
            Py_INCREF(e);
            PyObject *wr = PyWeakref_NewRef((PyObject *)q, (PyObject *)e);
            if (wr == NULL) {
                Py_DECREF(e);
                return NULL;
            }
            SW_PY_LOCK(&dead_mu);
            int taken = map_find(m, q->q) == e && e->dead;
            if (taken)
                e->dead = 0; /* stays linked until the next prune */
            SW_PY_UNLOCK(&dead_mu);
            if (taken) {
                PyObject *old = e->wr;
                e->wr = wr;
                Py_XDECREF(old);
                ManagerObject *mgr = e->mgr;
                Py_DECREF(e);
                return mgr;
            }
            Py_DECREF(wr);
            Py_DECREF(e);
            continue;
        }
        ManagerObject *mgr = sw_py_manager_new(st, q->q, q->device);
        if (mgr == NULL)
            return NULL;
        EntryObject *ne = PyObject_GC_New(EntryObject, st->entry_type);
        if (ne == NULL) {
            Py_DECREF(mgr);
            return NULL;
        }
        ne->key = q->q;
        ne->mgr = mgr;
        ne->wr = NULL;
        ne->map = m;
        ne->dead_next = NULL;
        ne->dead = ne->on_list = ne->idle = 0;
        PyObject_GC_Track(ne);
        ne->wr = PyWeakref_NewRef((PyObject *)q, (PyObject *)ne);
        if (ne->wr == NULL) {
            entry_discard(ne);
            return NULL;
        }
        if (map_find(m, q->q) != NULL) {
            entry_discard(ne);
            continue;
        }
        if (map_insert(m, ne) < 0) {
            entry_discard(ne);
            PyErr_NoMemory();
            return NULL;
        }
        return mgr;
    }
    PyErr_SetString(PyExc_RuntimeError,
                    "spillway.order_manager: the map kept changing during a "
                    "lookup");
    return NULL;
}

static int Map_traverse(MapObject *m, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(m));
    for (size_t i = 0; i < m->cap; i++)
        Py_VISIT(m->slots[i]);
    return 0;
}

static int Map_clear(MapObject *m)
{
    map_drop_all(m);
    return 0;
}

/* At thread exit (the thread state's dict is cleared): the managers are
 * dropped without waiting. */
static void Map_dealloc(MapObject *m)
{
    PyTypeObject *tp = Py_TYPE(m);
    PyObject_GC_UnTrack(m);
    map_drop_all(m);
    tp->tp_free((PyObject *)m);
    Py_DECREF(tp);
}

static PyType_Slot Map_slots[] = {
    {Py_tp_doc, "One thread's order managers (internal)."},
    {Py_tp_dealloc, Map_dealloc},
    {Py_tp_traverse, Map_traverse},
    {Py_tp_clear, Map_clear},
    {0, NULL},
};

PyType_Spec sw_py_map_spec = {
    .name = "spillway._OrderMap",
    .basicsize = sizeof(MapObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Map_slots,
};

/* This thread's map (borrowed: the thread state's dict holds it, under the
 * key `om`, spillway.order_manager itself).  NULL without an exception
 * when there is none and create is 0. */
static MapObject *thread_map(sw_py_state *st, PyObject *om, int create)
{
    PyObject *d = PyThreadState_GetDict();
    if (d == NULL) {
        if (create && !PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError,
                            "spillway.order_manager: this thread has no "
                            "thread state dictionary");
        return NULL;
    }
    PyObject *m = PyDict_GetItemWithError(d, om);
    if (m != NULL || PyErr_Occurred() || !create)
        return (MapObject *)m;
    MapObject *nm = PyObject_GC_New(MapObject, st->map_type);
    if (nm == NULL)
        return NULL;
    nm->slots = NULL;
    nm->cap = nm->n = 0;
    nm->dead = NULL;
    PyObject_GC_Track(nm);
    int r = PyDict_SetItem(d, om, (PyObject *)nm);
    Py_DECREF(nm);
    if (r < 0)
        return NULL;
    /* Borrowed from the dict (looked up again: a collection during
     * SetItem could have changed it). */
    m = PyDict_GetItemWithError(d, om);
    if (m == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError,
                        "spillway.order_manager: this thread's map vanished");
    return (MapObject *)m;
}

ManagerObject *sw_py_manager_of(sw_py_state *st, QueueObject *q)
{
    if (!sw_py_state_alive(st))
        return NULL;
    sw_py_drain_releases();
    MapObject *m = thread_map(st, st->order_manager, 1);
    if (m == NULL)
        return NULL;
    Py_INCREF(m);
    ManagerObject *mgr = map_get(st, m, q);
    Py_XINCREF(mgr);
    Py_DECREF(m);
    return mgr;
}

/* Under memory pressure (Queue() could not get device memory): wait,
 * without the GIL, for the work recorded by this thread's managers of dead
 * queues, then drop those that nothing else refers to.  Returns how many
 * were dropped, or -1 with an exception set.  Never called from a lookup
 * or a weak reference's callback, which must not wait. */
int sw_py_relieve_dead_managers(sw_py_state *st)
{
    if (!sw_py_state_alive(st))
        return -1;
    MapObject *m = thread_map(st, st->order_manager, 0);
    if (m == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(m);
    size_t n = 0, before = m->n;
    ManagerObject **dead = m->cap ? PyMem_Calloc(m->cap, sizeof *dead)
                                  : NULL;
    if (m->cap && dead == NULL) {
        Py_DECREF(m);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        EntryObject *e = m->slots[i];
        if (e != NULL && entry_dead(e))
            dead[n++] = (ManagerObject *)Py_NewRef(e->mgr);
    }
    sw_queue *in_task = sw_py_thread.task_queue;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n; i++)
        (void)sw_py_manager_wait_nogil(dead[i], dead[i]->q == in_task);
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < n; i++)
        Py_DECREF(dead[i]);
    PyMem_Free(dead);
    sw_py_drain_releases();
    if (map_has_dead(m))
        map_prune(m);
    size_t dropped = before > m->n ? before - m->n : 0;
    Py_DECREF(m);
    return (int)(dropped > INT_MAX ? INT_MAX : dropped);
}

/* ------------------------------------------------------------------------
 * spillway.order_manager
 * ---------------------------------------------------------------------- */

static PyObject *OMap_subscript(PyObject *self, PyObject *key)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (!Py_IS_TYPE(key, st->queue_type)) {
        PyErr_Format(PyExc_TypeError,
                     "spillway.order_manager keys are spillway.Queue "
                     "objects, not %.100s",
                     Py_TYPE(key)->tp_name);
        return NULL;
    }
    return (PyObject *)sw_py_manager_of(st, (QueueObject *)key);
}

static Py_ssize_t OMap_length(PyObject *self)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(self));
    if (st == NULL)
        return -1;
    MapObject *m = thread_map(st, self, 0);
    if (m == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return (Py_ssize_t)m->n;
}

static int OMap_contains(PyObject *self, PyObject *key)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(self));
    if (st == NULL)
        return -1;
    if (!Py_IS_TYPE(key, st->queue_type))
        return 0;
    MapObject *m = thread_map(st, self, 0);
    if (m == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return map_find(m, ((QueueObject *)key)->q) != NULL;
}

/* Wait for every manager of this thread, then drop them all.  The entries
 * are taken out of the map first, so that the map is empty (and usable)
 * while this thread waits without the GIL. */
static PyObject *OMap_clear(PyObject *self, PyObject *unused)
{
    sw_py_state *st = sw_py_type_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    MapObject *m = thread_map(st, self, 0);
    if (m == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    EntryObject **slots = m->slots;
    size_t cap = m->cap;
    m->slots = NULL;
    m->cap = m->n = 0;
    SW_PY_LOCK(&dead_mu);
    m->dead = NULL;
    for (size_t i = 0; i < cap; i++) {
        EntryObject *e = slots[i];
        if (e != NULL) {
            e->map = NULL;
            e->on_list = 0;
            e->dead_next = NULL;
        }
    }
    SW_PY_UNLOCK(&dead_mu);
    int rc = SW_OK;
    sw_queue *in_task = sw_py_thread.task_queue;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < cap; i++) {
        if (slots[i] == NULL)
            continue;
        int r = sw_py_manager_wait_nogil(slots[i]->mgr,
                                         slots[i]->mgr->q == in_task);
        if (rc == SW_OK)
            rc = r;
    }
    Py_END_ALLOW_THREADS
    for (size_t i = 0; i < cap; i++)
        if (slots[i] != NULL)
            Py_CLEAR(slots[i]->wr);
    for (size_t i = 0; i < cap; i++)
        Py_XDECREF(slots[i]);
    PyMem_Free(slots);
    sw_py_drain_releases();
    if (rc != SW_OK)
        return sw_py_raise_rc(st, rc);
    Py_RETURN_NONE;
}

static PyObject *OMap_repr(PyObject *self)
{
    Py_ssize_t n = OMap_length(self);
    if (n < 0)
        return NULL;
    return PyUnicode_FromFormat(
        "<spillway.order_manager: %zd manager(s) in this thread>", n);
}

static int OMap_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void OMap_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef OMap_methods[] = {
    {"clear", (PyCFunction)(void (*)(void))OMap_clear, METH_NOARGS,
     "clear()\n--\n\nWait for every order manager of this thread (releasing "
     "the GIL), then drop them all."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot OMap_slots[] = {
    {Py_tp_doc, "spillway.order_manager: order_manager[queue] is this "
                "thread's SequentialOrderManager of the queue.  The map is "
                "per thread and holds queues by weak reference: the manager "
                "of a queue that is gone is dropped at a later lookup once "
                "its work has completed; until then an equal queue gets it. "
                " len() counts this thread's managers."},
    {Py_tp_dealloc, OMap_dealloc},
    {Py_tp_traverse, OMap_traverse},
    {Py_tp_repr, OMap_repr},
    {Py_tp_methods, OMap_methods},
    {Py_mp_subscript, OMap_subscript},
    {Py_mp_length, OMap_length},
    {Py_sq_contains, OMap_contains},
    {0, NULL},
};

PyType_Spec sw_py_omap_spec = {
    .name = "spillway.OrderManagerMap",
    .basicsize = sizeof(OMapObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = OMap_slots,
};

int sw_py_ordermap_setup(PyObject *m, sw_py_state *st)
{
    if ((st->map_type = sw_py_add_type(m, &sw_py_map_spec)) == NULL ||
        (st->entry_type = sw_py_add_type(m, &sw_py_entry_spec)) == NULL ||
        (st->omap_type = sw_py_add_type(m, &sw_py_omap_spec)) == NULL)
        return -1;
    OMapObject *om = PyObject_GC_New(OMapObject, st->omap_type);
    if (om == NULL)
        return -1;
    PyObject_GC_Track(om);
    st->order_manager = (PyObject *)om;
    return PyModule_AddObjectRef(m, "order_manager", st->order_manager);
}

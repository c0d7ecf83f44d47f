/* The two loops of clustersim/network/maxmin.py, Links.group and Links.fill_py, in C.
 *
 * Why: at the `balanced` fidelity the flow model re-solves max-min rates over connected
 * groups of hundreds of flows and links at every start and end; these two loops over plain
 * ints and floats are the largest self time of such runs (issue 38 item 7; numbers in
 * docs/performance.md), and the interpreter spends most of it boxing and unboxing.
 *
 * Optional: setup.py builds this module where a C compiler works; maxmin.py uses the Python
 * when it is absent or CLUSTERSIM_NO_ACCEL is set. Both must give the same answers bit for bit
 * (tests/test_accel.py), so this code follows the Python statement by statement:
 *
 *  - the same IEEE double operations in the same order: a share is max(c, 0) / n with the
 *    count n converted to double (exact, as Python's float / int is), each frozen flow takes
 *    its share off each link of its route in route order, one subtraction at a time;
 *  - the same order of binding links: Python compares the tuples (share, place, link), and
 *    with no NaN and a unique place per link that is "share, then place" — so the sorted first
 *    entries and any correct min-heap give the same sequence as Python's sort and heapq (a
 *    heap entry equal to the next first entry comes after it in both: `heap[0] < first[k]`);
 *  - flows in the order they joined a link: PyDict_Next walks a dict in insertion order, as
 *    Python's `for f in dict` does.
 *  - a flow with multiplicities (Links.weights: folding under contention, orbits.py) takes
 *    fair * w off a link and w from its count, as the Python's second branch does; a link's
 *    count starts at its load (Links._load) where such flows are in flight.
 *
 * What it cannot reproduce exactly it declines (returns None, so the caller runs the Python):
 * a capacity that is not a finite float (inf - inf would make a NaN, whose comparisons the
 * tuple order above does not cover), a link listed twice, a route through a link outside the
 * group, or a link with no flows (Python raises ZeroDivisionError there). No Python state is
 * touched before it declines: its working arrays are its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h> /* qsort */

#include "../accel.h" /* builds only where doubles round as Python's do */

#define DECLINE 1 /* return code: let the Python do it (an exception is not set) */

/* An entry for a link: its share when the entry was made, and its place in the group. */
typedef struct {
    double share;
    Py_ssize_t place;
} Entry;

/* a < b as Python compares (share, place, link) tuples, given no NaN: places are unique. */
static inline int before(Entry a, Entry b)
{
    return a.share < b.share || (a.share == b.share && a.place < b.place);
}

static int cmp_entries(const void *pa, const void *pb)
{
    Entry a = *(const Entry *)pa, b = *(const Entry *)pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* `a` (of `*cap` items of `size` bytes) doubled, 64 items at first; NULL with MemoryError set
 * (and `a`, `*cap` unchanged) when the memory is not there. */
static void *grow(void *a, Py_ssize_t *cap, size_t size)
{
    Py_ssize_t n = *cap ? 2 * *cap : 64;
    void *b = PyMem_Realloc(a, (size_t)n * size);
    if (!b)
        return PyErr_NoMemory(), NULL;
    *cap = n;
    return b;
}

/* A growable array of entries kept as a binary min-heap (heapq's push and pop). */
typedef struct {
    Entry *a;
    Py_ssize_t n, cap;
} Heap;

static int heap_push(Heap *h, Entry e)
{
    if (h->n == h->cap) {
        Entry *a = grow(h->a, &h->cap, sizeof(Entry));
        if (!a)
            return -1;
        h->a = a;
    }
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!before(e, h->a[parent]))
            break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = e;
    return 0;
}

static Entry heap_pop(Heap *h)
{
    Entry top = h->a[0], last = h->a[--h->n];
    Py_ssize_t i = 0, n = h->n;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && before(h->a[child + 1], h->a[child]))
            child++;
        if (!before(h->a[child], last))
            break;
        h->a[i] = h->a[child];
        i = child;
    }
    if (n)
        h->a[i] = last;
    return top;
}

/* A growable array of indices (a stack, or the links a binding touched). */
typedef struct {
    Py_ssize_t *a;
    Py_ssize_t n, cap;
} Ints;

static int ints_push(Ints *v, Py_ssize_t x)
{
    if (v->n == v->cap) {
        Py_ssize_t *a = grow(v->a, &v->cap, sizeof(Py_ssize_t));
        if (!a)
            return -1;
        v->a = a;
    }
    v->a[v->n++] = x;
    return 0;
}

/* An int object as an index below `bound`: 0, or DECLINE (not an int in that range). */
static int as_index(PyObject *o, Py_ssize_t bound, Py_ssize_t *out)
{
    if (!PyLong_CheckExact(o))
        return DECLINE;
    Py_ssize_t v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred()) { /* too large for an index: an exact int can only overflow */
        PyErr_Clear();
        return DECLINE;
    }
    if (v < 0 || v >= bound)
        return DECLINE;
    *out = v;
    return 0;
}

/* link_flows[link], a dict of flow slots, or NULL (not a dict: DECLINE). */
static PyObject *flows_of(PyObject *link_flows, Py_ssize_t link)
{
    PyObject *d = PyList_GET_ITEM(link_flows, link);
    return PyDict_CheckExact(d) ? d : NULL;
}

/* flow_links[slot], a tuple of link ids, or NULL (not a tuple: DECLINE). */
static PyObject *route_of(PyObject *flow_links, Py_ssize_t slot)
{
    PyObject *t = PyList_GET_ITEM(flow_links, slot);
    return PyTuple_CheckExact(t) ? t : NULL;
}

/* ---------------------------------------------------------------- group */

/* Links.group: `dirty` (a list of link ids) filtered to links with flows, then a depth-first
 * walk; appends to `links` and `flows`. 0, DECLINE or -1 (an exception is set). */
static int group_into(PyObject *link_flows, PyObject *flow_links, PyObject *dirty, PyObject *links,
                      PyObject *flows)
{
    Py_ssize_t n_links = PyList_GET_SIZE(link_flows), n_flows = PyList_GET_SIZE(flow_links);
    /* reached by this walk (the Python keeps stamps in lists; these start at zero instead) */
    unsigned char *link_mark = PyMem_Calloc((size_t)n_links + 1, 1);
    unsigned char *flow_mark = PyMem_Calloc((size_t)n_flows + 1, 1);
    Ints stack = {0};
    int rc = -1;
    if (!link_mark || !flow_mark) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dirty); i++) {
        PyObject *o = PyList_GET_ITEM(dirty, i), *d;
        Py_ssize_t link;
        if (as_index(o, n_links, &link) || !(d = flows_of(link_flows, link)))
            goto decline;
        if (PyDict_GET_SIZE(d) && (PyList_Append(links, o) || ints_push(&stack, link)))
            goto fail;
    }
    for (Py_ssize_t i = 0; i < stack.n; i++)
        link_mark[stack.a[i]] = 1;
    /* the last link pushed, its flows in the order they joined it, their links in route order */
    while (stack.n) {
        PyObject *d = flows_of(link_flows, stack.a[--stack.n]), *key, *value, *route;
        Py_ssize_t pos = 0, f, id;
        while (PyDict_Next(d, &pos, &key, &value)) {
            if (as_index(key, n_flows, &f))
                goto decline;
            if (flow_mark[f])
                continue;
            flow_mark[f] = 1;
            if (PyList_Append(flows, key))
                goto fail;
            if (!(route = route_of(flow_links, f)))
                goto decline;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(route); j++) {
                PyObject *other = PyTuple_GET_ITEM(route, j);
                if (as_index(other, n_links, &id) || !flows_of(link_flows, id))
                    goto decline;
                if (link_mark[id])
                    continue;
                link_mark[id] = 1;
                if (PyList_Append(links, other) || ints_push(&stack, id))
                    goto fail;
            }
        }
    }
    rc = 0;
    goto done;
decline:
    rc = DECLINE;
    goto done;
fail:
    rc = -1;
done:
    PyMem_Free(link_mark);
    PyMem_Free(flow_mark);
    PyMem_Free(stack.a);
    return rc;
}

PyDoc_STRVAR(group_doc, "group(link_flows, flow_links, dirty) -> (links, flows) or None\n\n"
                        "Links.group_py's walk (maxmin.py); None: run the Python.");

static PyObject *group(PyObject *self, PyObject *args)
{
    PyObject *link_flows, *flow_links, *dirty;
    if (!PyArg_ParseTuple(args, "O!O!O:group", &PyList_Type, &link_flows, &PyList_Type, &flow_links,
                          &dirty))
        return NULL;
    /* a list of the ids first: nothing runs Python code (an iterator could) during the walk */
    PyObject *ids = PySequence_List(dirty);
    PyObject *links = PyList_New(0), *flows = PyList_New(0);
    int rc = ids && links && flows ? group_into(link_flows, flow_links, ids, links, flows) : -1;
    Py_XDECREF(ids);
    if (rc) {
        Py_XDECREF(links);
        Py_XDECREF(flows);
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NN)", links, flows);
}

/* ---------------------------------------------------------------- fill */

/* One link of the group, by its place: capacity not yet handed out, unfrozen flows, the
 * share of its latest entry, its flows (a borrowed dict). */
typedef struct {
    double cap, low;
    Py_ssize_t left;
    PyObject *flows;
} Link;

/* A link's share now: max(c, 0.0) / n as the Python writes it (no NaN reaches here). */
static inline double share_of(const Link *L)
{
    double c = L->cap;
    return (c < 0.0 ? 0.0 : c) / (double)L->left;
}

/* A frozen flow's share `fair` off every link of its `route`, in route order — `many`
 * times on a link where the flow has multiplicities (`many`: a tuple as long as the route,
 * or NULL: once on each, as the Python's two branches); the links' places added to
 * `touched`. 0, DECLINE (a link outside the group, a bad multiplicity) or -1. */
static int take_share(Link *lk, const Py_ssize_t *where, Py_ssize_t n_links, PyObject *route, PyObject *many,
                      double fair, Ints *touched)
{
    Py_ssize_t len = PyTuple_GET_SIZE(route);
    if (many && (!PyTuple_CheckExact(many) || PyTuple_GET_SIZE(many) != len))
        return DECLINE;
    for (Py_ssize_t j = 0; j < len; j++) {
        Py_ssize_t id, p, w;
        if (as_index(PyTuple_GET_ITEM(route, j), n_links, &id) || (p = where[id]) < 0)
            return DECLINE;
        if (!many) {
            lk[p].cap -= fair;
            lk[p].left -= 1;
        } else {
            if (as_index(PyTuple_GET_ITEM(many, j), PY_SSIZE_T_MAX, &w) || w > (1LL << 52))
                return DECLINE; /* (w exact as a double, as Python's float * int converts it) */
            lk[p].cap -= fair * (double)w;
            lk[p].left -= w;
        }
        if (ints_push(touched, p))
            return -1;
    }
    return 0;
}

/* Links.fill_py over `links` and `capacities` (lists of one length); appends the frozen
 * flows' slots and rates to `slots` and `rates`. `weights` and `load` (Links.weights and
 * Links._load, lists) where flows with multiplicities are in flight, else NULL: a link's
 * count is then its dict's size, which equals its load. 0, DECLINE or -1 (an exception is set). */
static int fill_into(PyObject *link_flows, PyObject *flow_links, PyObject *links, PyObject *capacities,
                     PyObject *weights, PyObject *load, PyObject *slots, PyObject *rates)
{
    Py_ssize_t n_links = PyList_GET_SIZE(link_flows), n_flows = PyList_GET_SIZE(flow_links);
    Py_ssize_t end = PyList_GET_SIZE(links), k = 0;
    Link *lk = PyMem_Malloc((size_t)end * sizeof(Link) + 1);
    Entry *first = PyMem_Malloc(((size_t)end + 1) * sizeof(Entry));
    Py_ssize_t *where = PyMem_Malloc(((size_t)n_links + 1) * sizeof(Py_ssize_t)); /* id → place */
    unsigned char *frozen = PyMem_Calloc((size_t)n_flows + 1, 1);
    Heap heap = {0};
    Ints touched = {0};
    int rc;
    if (!lk || !first || !where || !frozen) {
        PyErr_NoMemory();
        goto fail;
    }
    if (PyList_GET_SIZE(capacities) != end)
        goto decline;
    if (weights && (PyList_GET_SIZE(weights) != n_flows || PyList_GET_SIZE(load) != n_links))
        goto decline;
    for (Py_ssize_t id = 0; id < n_links; id++)
        where[id] = -1;
    /* every link's first entry, c / n, sorted once */
    for (Py_ssize_t i = 0; i < end; i++) {
        PyObject *c = PyList_GET_ITEM(capacities, i);
        Py_ssize_t link;
        Link *L = &lk[i];
        if (as_index(PyList_GET_ITEM(links, i), n_links, &link) || where[link] >= 0)
            goto decline;
        if (!PyFloat_CheckExact(c) || !isfinite(PyFloat_AS_DOUBLE(c)))
            goto decline;
        if (!(L->flows = flows_of(link_flows, link)) || !(L->left = PyDict_GET_SIZE(L->flows)))
            goto decline;
        if (weights && (as_index(PyList_GET_ITEM(load, link), PY_SSIZE_T_MAX, &L->left) || !L->left))
            goto decline;
        where[link] = i;
        L->cap = PyFloat_AS_DOUBLE(c);
        L->low = L->cap / (double)L->left;
        first[i] = (Entry){L->low, i};
    }
    qsort(first, (size_t)end, sizeof(Entry), cmp_entries);
    first[end] = (Entry){INFINITY, end}; /* past the last: no entry is larger */
    for (;;) {
        Entry e;
        if (heap.n && before(heap.a[0], first[k]))
            e = heap_pop(&heap);
        else if (k < end)
            e = first[k++];
        else
            break;
        Link *L = &lk[e.place];
        if (!L->left)
            continue;
        double fair = share_of(L);
        if (fair != e.share) { /* the share has moved since: back in at the current one */
            L->low = fair;
            if (heap_push(&heap, (Entry){fair, e.place}))
                goto fail;
            continue;
        }
        /* freeze the link's unfrozen flows at `fair` (one float object for all, as in Python) */
        PyObject *rate = PyFloat_FromDouble(fair), *key, *value, *route;
        Py_ssize_t pos = 0, f;
        if (!rate)
            goto fail;
        touched.n = 0;
        rc = 0;
        while (!rc && PyDict_Next(L->flows, &pos, &key, &value)) {
            if (as_index(key, n_flows, &f) || !(route = route_of(flow_links, f)))
                rc = DECLINE;
            else if (!frozen[f]) {
                frozen[f] = 1;
                PyObject *many = weights ? PyList_GET_ITEM(weights, f) : Py_None;
                rc = PyList_Append(slots, key) || PyList_Append(rates, rate)
                         ? -1
                         : take_share(lk, where, n_links, route, many == Py_None ? NULL : many, fair,
                                      &touched);
            }
        }
        Py_DECREF(rate);
        if (rc)
            goto done;
        /* A link needs a new entry only when its share fell below its latest one (see the
         * Python); a link touched twice is pushed at most once, as from the Python's set */
        for (Py_ssize_t j = 0; j < touched.n; j++) {
            Link *T = &lk[touched.a[j]];
            if (T->left) {
                double share = share_of(T);
                if (share < T->low) {
                    T->low = share;
                    if (heap_push(&heap, (Entry){share, touched.a[j]}))
                        goto fail;
                }
            }
        }
    }
    rc = 0;
    goto done;
decline:
    rc = DECLINE;
    goto done;
fail:
    rc = -1;
done:
    PyMem_Free(lk);
    PyMem_Free(first);
    PyMem_Free(where);
    PyMem_Free(frozen);
    PyMem_Free(heap.a);
    PyMem_Free(touched.a);
    return rc;
}

PyDoc_STRVAR(fill_doc, "fill(link_flows, flow_links, links, capacities[, weights, load]) -> (slots, rates) or None\n\n"
                       "Links.fill_py's progressive filling (maxmin.py); None: run the Python.");

static PyObject *fill(PyObject *self, PyObject *args)
{
    PyObject *link_flows, *flow_links, *links, *capacities, *weights = NULL, *load = NULL;
    if (!PyArg_ParseTuple(args, "O!O!OO|O!O!:fill", &PyList_Type, &link_flows, &PyList_Type, &flow_links,
                          &links, &capacities, &PyList_Type, &weights, &PyList_Type, &load))
        return NULL;
    if (!PyList_CheckExact(links) || !PyList_CheckExact(capacities) || (weights && !load))
        Py_RETURN_NONE;
    PyObject *slots = PyList_New(0), *rates = PyList_New(0);
    int rc = slots && rates
                 ? fill_into(link_flows, flow_links, links, capacities, weights, load, slots, rates)
                 : -1;
    if (rc) {
        Py_XDECREF(slots);
        Py_XDECREF(rates);
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NN)", slots, rates);
}

static PyMethodDef methods[] = {
    {"group", group, METH_VARARGS, group_doc},
    {"fill", fill, METH_VARARGS, fill_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cmaxmin", "Links.group and Links.fill in C (maxmin.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__cmaxmin(void)
{
    PyObject *m = PyModule_Create(&module);
    /* fill takes flows' multiplicities (maxmin.py asks an older build for none) */
    if (m && PyModule_AddIntConstant(m, "WEIGHTS", 1)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

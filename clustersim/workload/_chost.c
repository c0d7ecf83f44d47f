/* A pass's walks over its items, in C: the host's race with the GPU stream (host.py,
 * host_waits), the count of its launches (segments.py, launch_op), its runs of kernels
 * (segments.py, _layer_segments), their sums (segments.py, _run_sums) and its compute
 * (segments.py, compute_time), and the estimate's
 * walk over a pass's segments (experiments/plan_estimate.py, _pass_seconds).
 *
 * Why: a configuration's first estimate builds each pass of each kind of stage once, each walk
 * item by item — thousands of items a configuration, a few additions, comparisons or lookups
 * each, which the interpreter spends on boxing floats and dispatching bytecodes (issue 38
 * item 8, the cold estimate).
 *
 * Optional: setup.py builds it where a C compiler works; host.py and segments.py run the Python
 * where it is absent or CLUSTERSIM_NO_ACCEL is set. Both give the same results bit for bit
 * (tests/test_chost.py): the same IEEE double operations in the same order — Python's
 * `h + host_k - g` is `(h + host_k) - g` here — each of the Python's comparisons as the same C
 * comparison, and an int converted to a double where the Python mixes it with a float. What
 * the Python leaves to a builtin whose rounding is the interpreter's (`sum` of a ring's step
 * times) is that builtin's answer here too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../accel.h" /* builds only where doubles round as Python's do */

static PyObject *builtin_sum; /* the interpreter's own sum (its rounding is the version's) */
static PyObject *collective_str; /* "collective": a Segment's kind */
static PyObject *empty_tuple;    /* () */

/* 0 where a function `name` was given its `n` arguments, else -1 and a TypeError */
static int arity(const char *name, Py_ssize_t nargs, Py_ssize_t n)
{
    if (nargs == n)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, n);
    return -1;
}

/* the one-character kind of a pass item, or 0 (an item of no kind host.py knows) */
static Py_UCS4 kind_of(PyObject *item)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1)
        return 0;
    PyObject *k = PyTuple_GET_ITEM(item, 0);
    if (!PyUnicode_Check(k) || PyUnicode_GET_LENGTH(k) != 1)
        return 0;
    return PyUnicode_READ_CHAR(k, 0);
}

/* field i of the tuple `item` (NULL and an IndexError where it has none) */
static PyObject *field(PyObject *item, Py_ssize_t i)
{
    if (i >= PyTuple_GET_SIZE(item)) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    return PyTuple_GET_ITEM(item, i);
}

/* field i of `item` as a double (-1 and an exception where it is missing or not a number) */
static int number(PyObject *item, Py_ssize_t i, double *out)
{
    PyObject *x = field(item, i);
    if (!x)
        return -1;
    *out = PyFloat_AsDouble(x);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* the host seconds of issuing `kernels` (field i: None, each the pass's `dispatch`) */
static int host_seconds(PyObject *item, Py_ssize_t i, PyObject *kernels, double dispatch, double *out)
{
    PyObject *own = field(item, i);
    if (!own)
        return -1;
    if (own != Py_None) {
        *out = PyFloat_AsDouble(own);
    } else {
        *out = PyFloat_AsDouble(kernels) * dispatch;
    }
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* host.py's _work: (GPU seconds, launch included; whether the host issues any kernel; the
 * host's seconds; the kernels as a double), 0 for *issues where the item issues none */
static int work(PyObject *item, Py_UCS4 kind, double launch_s, double dispatch, double *t,
                int *issues, double *host, double *k)
{
    PyObject *kernels;
    double n;
    *issues = 0;
    if (kind == 'c' || kind == 'p' || kind == 'e') {
        PyObject *secs = field(item, 1);
        if (!secs)
            return -1;
        if (kind == 'e') { /* the slowest expert rank's kernels: max(item[1]) */
            if (!PyTuple_Check(secs) || PyTuple_GET_SIZE(secs) == 0) {
                PyErr_SetString(PyExc_TypeError, "an expert item's seconds must be a non-empty tuple");
                return -1;
            }
            *t = PyFloat_AsDouble(PyTuple_GET_ITEM(secs, 0));
            for (Py_ssize_t r = 1; r < PyTuple_GET_SIZE(secs); r++) {
                double x = PyFloat_AsDouble(PyTuple_GET_ITEM(secs, r));
                if (x > *t)
                    *t = x;
            }
        } else {
            *t = PyFloat_AsDouble(secs);
        }
        if ((*t == -1.0 && PyErr_Occurred()) || number(item, 3, &n))
            return -1;
        *t = *t + n * launch_s;
        if (!(kernels = field(item, 4)))
            return -1;
        if (host_seconds(item, 5, kernels, dispatch, host))
            return -1;
    } else if (kind == 'o') { /* a GEMM pipelined with a TP collective */
        if (number(item, 4, t) || number(item, 10, &n))
            return -1;
        *t = *t + n * launch_s;
        if (!(kernels = field(item, 7)) || host_seconds(item, 9, kernels, dispatch, host))
            return -1;
    } else if (kind == 'r') { /* ring attention: one kernel a step */
        PyObject *steps = field(item, 1), *total;
        if (!steps || !(total = PyObject_CallOneArg(builtin_sum, steps)))
            return -1;
        *t = PyFloat_AsDouble(total);
        Py_DECREF(total);
        Py_ssize_t len = PyObject_Length(steps);
        if ((*t == -1.0 && PyErr_Occurred()) || len < 0)
            return -1;
        *k = (double)len;
        *issues = len != 0;
        *host = *k * dispatch;
        return 0;
    } else {
        return 0;
    }
    int truth = PyObject_IsTrue(kernels);
    if (truth < 0)
        return -1;
    *issues = truth;
    *k = PyFloat_AsDouble(kernels);
    return *k == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* whether a collective item makes the host wait for the stream: item[6:7] == (True,) */
static int host_sync(PyObject *item)
{
    if (PyTuple_GET_SIZE(item) < 7)
        return 0;
    return PyObject_RichCompareBool(PyTuple_GET_ITEM(item, 6), Py_True, Py_EQ);
}

PyDoc_STRVAR(host_waits_doc, "host_waits(pieces, launch_s, dispatch) -> list\n\n"
                             "host.py's host_waits: the GPU's wait for the host in each piece.");

static PyObject *host_waits(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (arity("host_waits", nargs, 3))
        return NULL;
    double launch_s = PyFloat_AsDouble(args[1]), dispatch = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *pieces = PySequence_Fast(args[0], "pieces must be a sequence");
    if (!pieces)
        return NULL;
    Py_ssize_t n_pieces = PySequence_Fast_GET_SIZE(pieces);
    PyObject *waits = PyList_New(n_pieces);
    double g = 0.0, h = 0.0, wait = 0.0;
    if (!waits)
        goto fail;
    for (Py_ssize_t p = 0; p < n_pieces; p++) {
        PyObject *items = PySequence_Fast(PySequence_Fast_GET_ITEM(pieces, p), "a piece must be a sequence");
        if (!items)
            goto fail;
        wait = 0.0;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(items, i);
            Py_UCS4 kind = kind_of(item);
            double t = 0.0, host = 0.0, k = 0.0;
            int issues;
            if (work(item, kind, launch_s, dispatch, &t, &issues, &host, &k)) {
                Py_DECREF(items);
                goto fail;
            }
            if (!issues) {
                if (kind == 'x') {
                    int sync = host_sync(item);
                    if (sync < 0) {
                        Py_DECREF(items);
                        goto fail;
                    }
                    if (sync && g > h)
                        h = g;
                    h += dispatch;
                }
                continue;
            }
            double host_k = host / k, t_k = t / k;
            double first = h + host_k - g;
            if (!(first > 0.0))
                first = 0.0;
            double last = h + host + t_k - (g + first + t);
            if (!(last > 0.0))
                last = 0.0;
            wait += first + last;
            g += first + t + last;
            h += host;
        }
        Py_DECREF(items);
        PyObject *w = PyFloat_FromDouble(wait);
        if (!w)
            goto fail;
        PyList_SET_ITEM(waits, p, w);
    }
    if (n_pieces && h - g > 0.0) { /* a trailing collective starts once the host has issued it */
        PyObject *w = PyFloat_FromDouble(wait + (h - g));
        if (!w)
            goto fail;
        PyList_SetItem(waits, n_pieces - 1, w); /* steals w, drops the old */
    }
    Py_DECREF(pieces);
    return waits;
fail:
    Py_XDECREF(waits);
    Py_DECREF(pieces);
    return NULL;
}

PyDoc_STRVAR(launch_count_doc, "launch_count(items) -> (n, issued)\n\n"
                               "segments.py's _launch_count: the kernels whose launch is priced "
                               "apart, and whether the host issues any.");

static PyObject *launch_count(PyObject *self, PyObject *items)
{
    PyObject *seq = PySequence_Fast(items, "items must be a sequence"), *n = PyLong_FromLong(0);
    int issued = 0;
    if (!seq || !n)
        goto fail;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *add;
        Py_UCS4 kind = kind_of(item);
        if (kind == 'o') {
            add = field(item, 10);
            issued = 1;
        } else if (kind == 'c' || kind == 'e' || kind == 'p') {
            PyObject *kernels;
            if (!(add = field(item, 3)))
                goto fail;
            if (!issued && (!(kernels = field(item, 4)) || (issued = PyObject_IsTrue(kernels)) < 0))
                goto fail;
        } else {
            continue;
        }
        if (!add)
            goto fail;
        PyObject *sum = PyNumber_Add(n, add); /* the Python's n + i[3], whatever its type */
        if (!sum)
            goto fail;
        Py_SETREF(n, sum);
    }
    Py_DECREF(seq);
    return Py_BuildValue("(NO)", n, issued ? Py_True : Py_False);
fail:
    Py_XDECREF(seq);
    Py_XDECREF(n);
    return NULL;
}

/* append the Segment of the run items[start:stop] to segs: runs[key] where the same items (by
 * identity: the key is their addresses) ran before, else run_segment(items[start:stop]),
 * remembered; None appends nothing */
static int flush(PyObject *seq, Py_ssize_t start, Py_ssize_t stop, PyObject *runs, PyObject *run_segment,
                 PyObject *segs)
{
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *key = PyBytes_FromStringAndSize((const char *)(items + start),
                                              (Py_ssize_t)((stop - start) * sizeof(PyObject *)));
    if (!key)
        return -1;
    PyObject *seg = PyDict_GetItemWithError(runs, key); /* borrowed */
    if (!seg) {
        PyObject *run = PyErr_Occurred() ? NULL : PyList_New(stop - start);
        if (!run) {
            Py_DECREF(key);
            return -1;
        }
        for (Py_ssize_t i = start; i < stop; i++) {
            Py_INCREF(items[i]);
            PyList_SET_ITEM(run, i - start, items[i]);
        }
        seg = PyObject_CallOneArg(run_segment, run);
        Py_DECREF(run);
        if (!seg || PyDict_SetItem(runs, key, seg)) {
            Py_XDECREF(seg);
            Py_DECREF(key);
            return -1;
        }
        Py_DECREF(seg); /* the dict holds it */
    }
    Py_DECREF(key);
    return seg == Py_None ? 0 : PyList_Append(segs, seg);
}

PyDoc_STRVAR(layer_segments_doc,
             "layer_segments(items, run_segment, lone_segment) -> (segments, start of the last run)\n\n"
             "segments.py's _layer_segments: run_segment of each run of kernels (None: no Segment), "
             "lone_segment of each item no kernel merges with, each once per identity.");

static PyObject *layer_segments(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (arity("layer_segments", nargs, 3))
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "items must be a sequence");
    PyObject *segs = PyList_New(0), *runs = PyDict_New(), *made = PyDict_New();
    Py_ssize_t start = -1, last = 0; /* the run being merged starts at start (-1: none) */
    int last_p = 0;                   /* whether the run's last item runs beside a collective */
    if (!seq || !segs || !runs || !made)
        goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    last = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_UCS4 kind = kind_of(item);
        if (!kind) {
            PyErr_SetString(PyExc_ValueError, "a pass item's kind is one letter");
            goto fail;
        }
        int kernel = kind == 'c' || kind == 'e' || kind == 'p', p = kind == 'p';
        if (kernel && (start < 0 || last_p == p)) {
            if (start < 0)
                start = last = i;
            last_p = p;
            continue;
        }
        if (start >= 0 && flush(seq, start, i, runs, args[1], segs))
            goto fail;
        start = -1;
        if (kind == 'o' || kind == 'r' || kind == 'x') {
            PyObject *id = PyLong_FromVoidPtr(item), *seg;
            if (!id)
                goto fail;
            seg = PyDict_GetItemWithError(made, id); /* borrowed */
            if (!seg && !PyErr_Occurred()) {
                seg = PyObject_CallOneArg(args[2], item);
                if (seg && PyDict_SetItem(made, id, seg)) {
                    Py_CLEAR(seg);
                }
                Py_XDECREF(seg); /* the dict holds it */
            }
            Py_DECREF(id);
            if (!seg || PyList_Append(segs, seg))
                goto fail;
            last = n;
        } else { /* a kernel of the other side, or another kind, leads a new run */
            start = last = i;
            last_p = p;
        }
    }
    if (start >= 0 && flush(seq, start, n, runs, args[1], segs))
        goto fail;
    Py_DECREF(seq);
    Py_DECREF(runs);
    Py_DECREF(made);
    return Py_BuildValue("(Nn)", segs, last);
fail:
    Py_XDECREF(seq);
    Py_XDECREF(segs);
    Py_XDECREF(runs);
    Py_XDECREF(made);
    return NULL;
}

PyDoc_STRVAR(pass_seconds_doc,
             "pass_seconds(segments, seconds_of) -> float\n\n"
             "plan_estimate.py's _pass_seconds: a pass's segments one after another, seconds_of each "
             "(once per identity); a compute segment marked overlap beside its neighbouring "
             "collective takes the longer of the two (not the pass's last two segments).");

/* whether `seg` is a collective Segment (kind == "collective"), -1 on an error */
static int collective(PyObject *seg)
{
    PyObject *kind = PyObject_GetAttrString(seg, "kind");
    if (!kind)
        return -1;
    int out = PyObject_RichCompareBool(kind, collective_str, Py_EQ);
    Py_DECREF(kind);
    return out;
}

/* whether `seg` runs beside its neighbouring collective (its overlap, as a truth), -1 on an error */
static int beside(PyObject *seg)
{
    PyObject *overlap = PyObject_GetAttrString(seg, "overlap");
    if (!overlap)
        return -1;
    int out = PyObject_IsTrue(overlap);
    Py_DECREF(overlap);
    return out;
}

static PyObject *pass_seconds(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (arity("pass_seconds", nargs, 2))
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "segments must be a sequence"), *known = PyDict_New();
    double *times = NULL;
    signed char *flags = NULL; /* per segment: 1 collective, 2 overlap (each as read) */
    if (!seq || !known)
        goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    times = PyMem_Malloc((n ? n : 1) * sizeof(double));
    flags = PyMem_Malloc(n ? n : 1);
    if (!times || !flags) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) { /* each segment's seconds, by its identity */
        PyObject *seg = PySequence_Fast_GET_ITEM(seq, k), *id = PyLong_FromVoidPtr(seg), *t;
        if (!id)
            goto fail;
        t = PyDict_GetItemWithError(known, id); /* borrowed */
        if (t) {
            Py_INCREF(t);
        } else if (!PyErr_Occurred() && (t = PyObject_CallOneArg(args[1], seg)) && PyDict_SetItem(known, id, t)) {
            Py_CLEAR(t);
        }
        Py_DECREF(id);
        if (!t)
            goto fail;
        times[k] = PyFloat_AsDouble(t);
        Py_DECREF(t);
        if (times[k] == -1.0 && PyErr_Occurred())
            goto fail;
        flags[k] = -1; /* read when a pair asks */
    }
    double total = 0.0;
    Py_ssize_t k = 0;
    while (k < n) {
        if (k + 2 < n) { /* a pair that is not the pass's last two segments */
            int pair = 0;
            for (Py_ssize_t i = k; i <= k + 1; i++) {
                if (flags[i] < 0) {
                    int c = collective(PySequence_Fast_GET_ITEM(seq, i)), o;
                    if (c < 0 || (o = beside(PySequence_Fast_GET_ITEM(seq, i))) < 0)
                        goto fail;
                    flags[i] = (signed char)(c | (o << 1));
                }
            }
            /* (a.overlap and b is a collective) or (a is a collective and b.overlap) */
            pair = ((flags[k] & 2) && (flags[k + 1] & 1)) || ((flags[k] & 1) && (flags[k + 1] & 2));
            if (pair) {
                total += times[k + 1] > times[k] ? times[k + 1] : times[k];
                k += 2;
                continue;
            }
        }
        total += times[k];
        k += 1;
    }
    PyMem_Free(times);
    PyMem_Free(flags);
    Py_DECREF(seq);
    Py_DECREF(known);
    return PyFloat_FromDouble(total);
fail:
    PyMem_Free(times);
    PyMem_Free(flags);
    Py_XDECREF(seq);
    Py_XDECREF(known);
    return NULL;
}

PyDoc_STRVAR(run_sums_doc, "run_sums(items, t, f, beside, beside_sum) -> (t, f, beside)\n\n"
                            "segments.py's _run_sums: a run's seconds, FLOPs and beside tuple "
                            "with its kernels added, in order.");

static PyObject *run_sums(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (arity("run_sums", nargs, 5))
        return NULL;
    double t = PyFloat_AsDouble(args[1]), f = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "items must be a sequence"), *beside = args[3];
    if (!seq)
        return NULL;
    Py_INCREF(beside);
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        double dt, df;
        if (!PyTuple_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "a pass item must be a tuple");
            goto fail;
        }
        if (number(item, 1, &dt) || number(item, 2, &df))
            goto fail;
        t += dt;
        f += df;
        PyObject *own = PyTuple_GET_SIZE(item) > 6 ? PyTuple_GET_ITEM(item, 6) : empty_tuple;
        if (beside == Py_None) {
            Py_INCREF(own);
            Py_SETREF(beside, own);
        } else {
            int truth = PyObject_IsTrue(beside); /* an empty one stays empty (beside_sum) */
            if (truth < 0)
                goto fail;
            if (truth) {
                PyObject *sum = PyObject_CallFunctionObjArgs(args[4], beside, own, NULL);
                if (!sum)
                    goto fail;
                Py_SETREF(beside, sum);
            }
        }
    }
    Py_DECREF(seq);
    return Py_BuildValue("(ddN)", t, f, beside);
fail:
    Py_DECREF(seq);
    Py_DECREF(beside);
    return NULL;
}

PyDoc_STRVAR(compute_sums_doc, "compute_sums(segments) -> (seconds, FLOPs)\n\n"
                                "segments.py's compute_time: the interpreter's sum of each "
                                "non-collective segment's duration + margin, and of its FLOPs.");

static PyObject *compute_sums(PyObject *self, PyObject *segments)
{
    PyObject *seq = PySequence_Fast(segments, "segments must be a sequence");
    PyObject *times = PyList_New(0), *flops = PyList_New(0), *out = NULL;
    if (!seq || !times || !flops)
        goto done;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *seg = PySequence_Fast_GET_ITEM(seq, k);
        int c = collective(seg);
        if (c < 0)
            goto done;
        if (c)
            continue;
        PyObject *d = PyObject_GetAttrString(seg, "duration"), *m = NULL, *t = NULL, *f = NULL;
        if (d && (m = PyObject_GetAttrString(seg, "margin")))
            t = PyNumber_Add(d, m); /* s.duration + s.margin */
        Py_XDECREF(d);
        Py_XDECREF(m);
        if (!t || PyList_Append(times, t)) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
        if (!(f = PyObject_GetAttrString(seg, "flops")) || PyList_Append(flops, f)) {
            Py_XDECREF(f);
            goto done;
        }
        Py_DECREF(f);
    }
    /* summed by the interpreter's own sum, in the segments' order (as the Python's generators) */
    PyObject *t = PyObject_CallOneArg(builtin_sum, times), *f = t ? PyObject_CallOneArg(builtin_sum, flops) : NULL;
    if (t && f)
        out = PyTuple_Pack(2, t, f);
    Py_XDECREF(t);
    Py_XDECREF(f);
done:
    Py_XDECREF(seq);
    Py_XDECREF(times);
    Py_XDECREF(flops);
    return out;
}

static PyMethodDef methods[] = {
    {"host_waits", (PyCFunction)(void (*)(void))host_waits, METH_FASTCALL, host_waits_doc},
    {"launch_count", (PyCFunction)launch_count, METH_O, launch_count_doc},
    {"layer_segments", (PyCFunction)(void (*)(void))layer_segments, METH_FASTCALL, layer_segments_doc},
    {"pass_seconds", (PyCFunction)(void (*)(void))pass_seconds, METH_FASTCALL, pass_seconds_doc},
    {"run_sums", (PyCFunction)(void (*)(void))run_sums, METH_FASTCALL, run_sums_doc},
    {"compute_sums", (PyCFunction)compute_sums, METH_O, compute_sums_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chost", "A pass's walks over its items in C (host.py, segments.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__chost(void)
{
    PyObject *builtins = PyImport_ImportModule("builtins");
    if (!builtins)
        return NULL;
    builtin_sum = PyObject_GetAttrString(builtins, "sum");
    Py_DECREF(builtins);
    collective_str = PyUnicode_InternFromString("collective");
    empty_tuple = PyTuple_New(0);
    if (!builtin_sum || !collective_str || !empty_tuple)
        return NULL;
    return PyModule_Create(&module);
}

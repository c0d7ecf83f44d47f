/* The pass loops of clustersim/experiments/steady_1f1b.py, _passes and _round, in C.
 *
 * Why: the estimate of a deep pipeline (64 stages, 256 micro-batches: Megatron 2021 Table 1's
 * 1008B row) spends most of its time in 1F1B's fill, rounds and drain — a few additions and
 * comparisons per pass, which the interpreter spends on boxing floats (issue 38 item 7).
 *
 * Optional: setup.py builds it where a C compiler works; steady_1f1b.py runs the Python where
 * it is absent or CLUSTERSIM_NO_ACCEL is set. Both give the same floats bit for bit
 * (tests/test_c1f1b.py): the same IEEE double additions in the same order, and each of the
 * Python's comparisons as the same C comparison — `if a > t: t = a` is `if (a > t) t = a;`,
 * `(t if t > u else u)` is `(t > u ? t : u)` (so of two equal values, signed zeros included,
 * the same one is kept). The state stays in the Python lists the Python reads between rounds
 * (OneFOneB._jump): this code reads and writes their items in place.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../accel.h" /* builds only where doubles round as Python's do */

/* item i of the list `xs` as a double (-1 and an exception where it is out of range or not
 * a number) */
static int get(PyObject *xs, Py_ssize_t i, double *out)
{
    if (i < 0 || i >= PyList_GET_SIZE(xs)) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return -1;
    }
    *out = PyFloat_AsDouble(PyList_GET_ITEM(xs, i));
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* set item i of the list `xs` to a new float x */
static int put(PyObject *xs, Py_ssize_t i, double x)
{
    if (i < 0 || i >= PyList_GET_SIZE(xs)) {
        PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
        return -1;
    }
    PyObject *f = PyFloat_FromDouble(x);
    if (!f)
        return -1;
    PyList_SetItem(xs, i, f); /* steals f */
    return 0;
}

/* one pass, as _passes runs it: after its input's arrival (arrive[j]; NULL: no input), step
 * long, its output sent after the lane's earlier sends, arriving hop later (out[j]; NULL:
 * none sent); *t and *u are the stage's clock and send lane */
static int pass(double *t, double *u, PyObject *arrive, Py_ssize_t j, double step, PyObject *out,
                double hop)
{
    double a;
    if (arrive) {
        if (get(arrive, j, &a))
            return -1;
        if (a > *t)
            *t = a;
    }
    *t += step;
    if (out) {
        *u = (*t > *u ? *t : *u) + hop;
        return put(out, j, *u);
    }
    return 0;
}

/* a list, or None (NULL) */
static int list_or_none(PyObject *x, PyObject **out)
{
    if (x == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyList_Check(x)) {
        PyErr_SetString(PyExc_TypeError, "expected a list or None");
        return -1;
    }
    *out = x;
    return 0;
}

PyDoc_STRVAR(passes_doc, "passes(t, u, step, hop, arrive, out, start, stop) -> (t, u): steady_1f1b._passes.");

static PyObject *passes(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    double t, u, step, hop;
    PyObject *arrive, *out;
    Py_ssize_t start, stop;
    if (n != 8) {
        PyErr_SetString(PyExc_TypeError, "passes takes 8 arguments");
        return NULL;
    }
    t = PyFloat_AsDouble(args[0]);
    u = PyFloat_AsDouble(args[1]);
    step = PyFloat_AsDouble(args[2]);
    hop = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred() || list_or_none(args[4], &arrive) || list_or_none(args[5], &out))
        return NULL;
    start = PyLong_AsSsize_t(args[6]);
    stop = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred())
        return NULL;
    for (Py_ssize_t j = start; j < stop; j++)
        if (pass(&t, &u, arrive, j, step, out, hop))
            return NULL;
    return Py_BuildValue("(dd)", t, u);
}

PyDoc_STRVAR(round_doc, "round(r, lo, rows, clock, lane): steady_1f1b._round, in place.");

static PyObject *round_(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "round takes 5 arguments");
        return NULL;
    }
    Py_ssize_t r = PyLong_AsSsize_t(args[0]), lo = PyLong_AsSsize_t(args[1]);
    PyObject *rows = args[2], *clock = args[3], *lane = args[4];
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_Check(rows) || !PyList_Check(clock) || !PyList_Check(lane)) {
        PyErr_SetString(PyExc_TypeError, "rows, clock and lane must be lists");
        return NULL;
    }
    for (Py_ssize_t s = PyList_GET_SIZE(rows) - 1; s >= lo; s--) {
        /* w, f_prev, f_own, b_next, b_own, f_s, b_s, hop_down, hop_up (OneFOneB.run's rows) */
        PyObject *row = PyList_GET_ITEM(rows, s), *f_prev, *f_own, *b_next, *b_own;
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 9) {
            PyErr_SetString(PyExc_TypeError, "a row must be a tuple of 9");
            return NULL;
        }
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 0)) + r;
        double f_s = PyFloat_AsDouble(PyTuple_GET_ITEM(row, 5));
        double b_s = PyFloat_AsDouble(PyTuple_GET_ITEM(row, 6));
        double hop_down = PyFloat_AsDouble(PyTuple_GET_ITEM(row, 7));
        double hop_up = PyFloat_AsDouble(PyTuple_GET_ITEM(row, 8));
        double t, u;
        if (PyErr_Occurred() || list_or_none(PyTuple_GET_ITEM(row, 1), &f_prev) ||
            list_or_none(PyTuple_GET_ITEM(row, 2), &f_own) ||
            list_or_none(PyTuple_GET_ITEM(row, 3), &b_next) ||
            list_or_none(PyTuple_GET_ITEM(row, 4), &b_own) || get(clock, s, &t) || get(lane, s, &u))
            return NULL;
        if (pass(&t, &u, f_prev, j, f_s, f_own, hop_down) ||
            pass(&t, &u, b_next, r, b_s, b_own, hop_up))
            return NULL;
        if (put(clock, s, t) || put(lane, s, u))
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"passes", (PyCFunction)(void (*)(void))passes, METH_FASTCALL, passes_doc},
    {"round", (PyCFunction)(void (*)(void))round_, METH_FASTCALL, round_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_c1f1b", "1F1B's pass loops in C (steady_1f1b.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__c1f1b(void) { return PyModule_Create(&module); }

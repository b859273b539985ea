/* CPU atomics on int64 counters in node-shared memory (the node credit pool).
 *
 * MPI RMA atomics on a shared window cost ~10 us per operation under
 * contention; a lock-free CPU atomic on the same memory costs well under one.
 * Python cannot issue one itself, hence this tiny helper.  Addresses come from
 * the MPI shared window; every function takes (address, index, ...).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int64_t *slot_of(PyObject *const *args) {
    uintptr_t base = (uintptr_t)PyLong_AsVoidPtr(args[0]);
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    if ((base == 0 || index < 0) && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "null address or negative index");
    if (PyErr_Occurred()) return NULL;
    return (int64_t *)base + index;
}

/* try_take(address, index) -> bool: decrement if positive (compare-and-swap loop). */
static PyObject *try_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "try_take(address, index)"); return NULL; }
    int64_t *p = slot_of(args);
    if (!p) return NULL;
    int64_t seen = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    while (seen > 0) {
        if (__atomic_compare_exchange_n(p, &seen, seen - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

/* take_up_to(address, index, most) -> taken: take min(value, most), never below zero (compare-and-swap loop). */
static PyObject *take_up_to(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "take_up_to(address, index, most)"); return NULL; }
    int64_t *p = slot_of(args);
    if (!p) return NULL;
    long long most = PyLong_AsLongLong(args[2]);
    if (most == -1 && PyErr_Occurred()) return NULL;
    int64_t seen = __atomic_load_n(p, __ATOMIC_ACQUIRE), taken = 0;
    while (seen > 0 && most > 0) {
        taken = seen < most ? seen : most;
        if (__atomic_compare_exchange_n(p, &seen, seen - taken, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) break;
        taken = 0;
    }
    return PyLong_FromLongLong(taken);
}

/* fetch_add(address, index, amount) -> previous value. */
static PyObject *fetch_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "fetch_add(address, index, amount)"); return NULL; }
    int64_t *p = slot_of(args);
    if (!p) return NULL;
    long long amount = PyLong_AsLongLong(args[2]);
    if (amount == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(__atomic_fetch_add(p, (int64_t)amount, __ATOMIC_ACQ_REL));
}

/* load(address, index) -> value. */
static PyObject *load(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "load(address, index)"); return NULL; }
    int64_t *p = slot_of(args);
    if (!p) return NULL;
    return PyLong_FromLongLong(__atomic_load_n(p, __ATOMIC_ACQUIRE));
}

static PyMethodDef methods[] = {
    {"try_take", (PyCFunction)(void (*)(void))try_take, METH_FASTCALL, "Decrement if positive; True if taken."},
    {"take_up_to", (PyCFunction)(void (*)(void))take_up_to, METH_FASTCALL, "Take min(value, most); returns it."},
    {"fetch_add", (PyCFunction)(void (*)(void))fetch_add, METH_FASTCALL, "Atomic add; returns the old value."},
    {"load", (PyCFunction)(void (*)(void))load, METH_FASTCALL, "Atomic load."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_atomics", "CPU atomics on shared memory.", -1, methods};

PyMODINIT_FUNC PyInit__atomics(void) { return PyModule_Create(&module); }

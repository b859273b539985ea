/* The compiled credit ledger (see _ledger.h): RankCredits and NodeCredits of mailrail.flow, in C. */
#include "_ledger.h"

#include <string.h>
#include <structmember.h>

static int group_of(Ledger *ledger, int rank) {
    return ledger->group_map != NULL ? ledger->group_map[rank] : rank / ledger->ranks_per_group;
}

static int64_t load_credits(Ledger *ledger, int dest) {
    return ledger->node_mode ? __atomic_load_n(&ledger->credits[dest], __ATOMIC_ACQUIRE) : ledger->credits[dest];
}

int ledger_try_acquire(Ledger *ledger, int dest) {
    int64_t *credits = &ledger->credits[dest];
    if (!ledger->node_mode) {
        if (*credits <= 0) return 0;
        (*credits)--;
        return 1;
    }
    /* Every rank of the node takes from this counter: decrement only if positive (never overdraw). */
    int64_t seen = __atomic_load_n(credits, __ATOMIC_ACQUIRE);
    while (seen > 0)
        if (__atomic_compare_exchange_n(credits, &seen, seen - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
    return 0;
}

long long ledger_take_piggyback(Ledger *ledger, int dest) {
    if (ledger->node_mode || !ledger->piggyback) return 0;
    long long count = ledger->owed[dest];
    if (count) {
        if (count > ledger->max_tag) count = ledger->max_tag;
        ledger->owed[dest] -= count;
        ledger->unreturned[dest] -= count;
        ledger->unreturned_total -= count;
        ledger->piggybacked += count;
    }
    return count;
}

int ledger_on_credit_return(Ledger *ledger, int source, long long count) {
    if (!ledger->node_mode) {
        ledger->credits[source] += count;
        if (ledger->credits[source] > ledger->credits_per_pair) {
            PyErr_Format(ledger->protocol_error,
                         "rank %d returned %lld credits, leaving %lld > %lld credits per pair", source, count,
                         (long long)ledger->credits[source], ledger->credits_per_pair);
            return -1;
        }
        return 0;
    }
    int64_t now = __atomic_add_fetch(&ledger->credits[source], (int64_t)count, __ATOMIC_ACQ_REL);
    if (now > ledger->credits_per_pair) {
        PyErr_Format(ledger->protocol_error,
                     "rank %d returned %lld credits, leaving this node %lld > %lld credits per node", source,
                     count, (long long)now, ledger->credits_per_pair);
        return -1;
    }
    return 0;
}

int ledger_on_arrival(Ledger *ledger, int source, long long tag) {
    int group = group_of(ledger, source);
    int64_t unreturned = ++ledger->unreturned[group];
    if (++ledger->unreturned_total > ledger->unreturned_high_water)
        ledger->unreturned_high_water = ledger->unreturned_total;
    if (unreturned > ledger->credits_per_pair) {
        if (ledger->node_mode)
            PyErr_Format(ledger->protocol_error,
                         "node %d (via rank %d) has %lld unreturned messages here but only %lld credits per node: "
                         "a send without credit", group, source, (long long)unreturned, ledger->credits_per_pair);
        else
            PyErr_Format(ledger->protocol_error,
                         "rank %d has %lld unreturned messages here but only %lld credits per pair: "
                         "a send without credit", source, (long long)unreturned, ledger->credits_per_pair);
        return -1;
    }
    if (tag && !ledger->node_mode) { /* piggybacked credits obey the same bound */
        if (ledger_on_credit_return(ledger, source, tag) < 0) return -1;
        return 1;
    }
    return 0;
}

long long ledger_on_release(Ledger *ledger, int source) {
    int group = group_of(ledger, source);
    long long count = ++ledger->owed[group];
    if (count < ledger->return_threshold) return 0;
    ledger->owed[group] = 0;
    ledger->unreturned[group] -= count;
    ledger->unreturned_total -= count;
    return count;
}

/* ------------------------------------------------------- the FlowControl interface, for Python */

static int checked_rank(Ledger *ledger, PyObject *arg, int *rank) {
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value >= ledger->ranks) {
        PyErr_Format(PyExc_IndexError, "rank %ld is out of range 0..%d", value, ledger->ranks - 1);
        return -1;
    }
    *rank = (int)value;
    return 0;
}

static int detached(Ledger *ledger) {
    if (ledger->credits != NULL) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the credit ledger was detached from its shared memory (finalize())");
    return 1;
}

static PyObject *Ledger_try_acquire(Ledger *self, PyObject *arg) {
    int dest;
    if (checked_rank(self, arg, &dest) < 0 || detached(self)) return NULL;
    return PyBool_FromLong(ledger_try_acquire(self, dest));
}

static PyObject *Ledger_available(Ledger *self, PyObject *arg) {
    int dest;
    if (checked_rank(self, arg, &dest) < 0 || detached(self)) return NULL;
    return PyLong_FromLongLong(load_credits(self, dest));
}

static PyObject *Ledger_take_piggyback(Ledger *self, PyObject *arg) {
    int dest;
    if (checked_rank(self, arg, &dest) < 0) return NULL;
    return PyLong_FromLongLong(ledger_take_piggyback(self, dest));
}

static PyObject *Ledger_on_arrival(Ledger *self, PyObject *args) {
    int source;
    long long tag;
    PyObject *rank;
    if (!PyArg_ParseTuple(args, "OL", &rank, &tag) || checked_rank(self, rank, &source) < 0 || detached(self))
        return NULL;
    int brought = ledger_on_arrival(self, source, tag);
    return brought < 0 ? NULL : PyBool_FromLong(brought);
}

static PyObject *Ledger_on_release(Ledger *self, PyObject *arg) {
    int source;
    if (checked_rank(self, arg, &source) < 0 || detached(self)) return NULL;
    long long count = ledger_on_release(self, source);
    if (!count) Py_RETURN_NONE;
    return Py_BuildValue("(iL)", source, count);
}

static PyObject *Ledger_on_credit_return(Ledger *self, PyObject *args) {
    int source;
    long long count;
    PyObject *rank;
    if (!PyArg_ParseTuple(args, "OL", &rank, &count) || checked_rank(self, rank, &source) < 0 || detached(self))
        return NULL;
    if (ledger_on_credit_return(self, source, count) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Ledger_credit_state_bytes(Ledger *self, PyObject *unused) {
    /* Private state: owed and unreturned per group, plus the credits per destination in rank mode. */
    long long arrays = self->node_mode ? 2LL * self->groups : 3LL * self->ranks;
    return PyLong_FromLongLong(arrays * (long long)sizeof(int64_t));
}

static PyObject *Ledger_shared_state_bytes(Ledger *self, PyObject *unused) {
    return PyLong_FromLongLong(self->node_mode ? (long long)self->ranks * (long long)sizeof(int64_t) : 0);
}

static PyObject *Ledger_detach(Ledger *self, PyObject *unused) {
    /* The node's shared memory is about to be freed: from now on only the counters remain readable. */
    if (self->node_mode) {
        self->credits = NULL;
        self->group_map = NULL;
        self->ranks_per_group = 1;
        Py_CLEAR(self->owner);
    }
    Py_RETURN_NONE;
}

static PyObject *Ledger_get_name(Ledger *self, void *closure) {
    return PyUnicode_FromString(self->node_mode ? "node" : "rank");
}

static PyObject *Ledger_get_silent(Ledger *self, void *closure) { return PyBool_FromLong(self->node_mode); }

static PyGetSetDef Ledger_getset[] = {
    {"name", (getter)Ledger_get_name, NULL, "the flow-control mode", NULL},
    {"credits_change_silently", (getter)Ledger_get_silent, NULL,
     "credits may appear without an event (node mode: another rank refilled shared memory)", NULL},
    {NULL},
};

static PyMemberDef Ledger_members[] = {
    {"credits_per_pair", T_LONGLONG, offsetof(Ledger, credits_per_pair), READONLY, NULL},
    {"return_threshold", T_LONGLONG, offsetof(Ledger, return_threshold), READONLY, NULL},
    {"unreturned_total", T_LONGLONG, offsetof(Ledger, unreturned_total), READONLY, NULL},
    {"unreturned_high_water", T_LONGLONG, offsetof(Ledger, unreturned_high_water), READONLY, NULL},
    {"piggybacked", T_LONGLONG, offsetof(Ledger, piggybacked), READONLY, NULL},
    {NULL},
};

static PyMethodDef Ledger_methods[] = {
    {"try_acquire", (PyCFunction)Ledger_try_acquire, METH_O, NULL},
    {"available", (PyCFunction)Ledger_available, METH_O, NULL},
    {"take_piggyback", (PyCFunction)Ledger_take_piggyback, METH_O, NULL},
    {"on_arrival", (PyCFunction)Ledger_on_arrival, METH_VARARGS, NULL},
    {"on_release", (PyCFunction)Ledger_on_release, METH_O, NULL},
    {"on_credit_return", (PyCFunction)Ledger_on_credit_return, METH_VARARGS, NULL},
    {"credit_state_bytes", (PyCFunction)Ledger_credit_state_bytes, METH_NOARGS, NULL},
    {"shared_state_bytes", (PyCFunction)Ledger_shared_state_bytes, METH_NOARGS, NULL},
    {"detach", (PyCFunction)Ledger_detach, METH_NOARGS, "forget the node-shared memory before it is freed"},
    {NULL},
};

static int Ledger_init(Ledger *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"mode", "ranks", "credits_per_pair", "return_threshold", "protocol_error",
                               "piggyback", "max_tag", "nodes", "ranks_per_node", "node_map", "pool",
                               "owner", NULL};
    const char *mode;
    int ranks, piggyback = 1, nodes = 0, ranks_per_node = 0;
    long long credits_per_pair, return_threshold, max_tag = 32767;
    PyObject *protocol_error, *node_map = Py_None, *pool = Py_None, *owner = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "siLLO|$pLiiOOO", keywords, &mode, &ranks, &credits_per_pair,
                                     &return_threshold, &protocol_error, &piggyback, &max_tag, &nodes,
                                     &ranks_per_node, &node_map, &pool, &owner))
        return -1;
    if (self->owed != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "CreditLedger is initialized once");
        return -1;
    }
    if (ranks < 1 || credits_per_pair < 1 || return_threshold < 1 || max_tag < 1) {
        PyErr_SetString(PyExc_ValueError, "ranks, credits_per_pair, return_threshold and max_tag must be >= 1");
        return -1;
    }
    self->ranks = ranks;
    self->credits_per_pair = credits_per_pair;
    self->return_threshold = return_threshold;
    self->max_tag = max_tag;
    self->piggyback = piggyback;
    self->ranks_per_group = 1;
    self->protocol_error = Py_NewRef(protocol_error);
    if (strcmp(mode, "rank") == 0) {
        self->groups = ranks;
        self->credits = PyMem_Calloc(ranks, sizeof(int64_t));
        if (self->credits == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int rank = 0; rank < ranks; rank++) self->credits[rank] = credits_per_pair;
    } else if (strcmp(mode, "node") == 0) {
        /* The pool (int64 per destination rank) and the optional node map (int32 per rank) live in
         * node-shared memory owned by the caller: addresses, kept alive through owner. */
        if (nodes < 1 || pool == Py_None || (node_map == Py_None) == (ranks_per_node < 1)) {
            PyErr_SetString(PyExc_ValueError, "node mode needs nodes >= 1, a pool address, and either "
                                              "ranks_per_node >= 1 or a node_map address");
            return -1;
        }
        self->node_mode = 1;
        self->groups = nodes;
        self->credits = PyLong_AsVoidPtr(pool);
        if (node_map != Py_None) self->group_map = PyLong_AsVoidPtr(node_map);
        else self->ranks_per_group = ranks_per_node;
        if (PyErr_Occurred()) return -1;
        self->owner = Py_NewRef(owner);
    } else {
        PyErr_Format(PyExc_ValueError, "mode must be 'rank' or 'node', not '%s'", mode);
        return -1;
    }
    self->owed = PyMem_Calloc(self->groups, sizeof(int64_t));
    self->unreturned = PyMem_Calloc(self->groups, sizeof(int64_t));
    if (self->owed == NULL || self->unreturned == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Ledger_dealloc(Ledger *self) {
    if (!self->node_mode) PyMem_Free(self->credits);
    PyMem_Free(self->owed);
    PyMem_Free(self->unreturned);
    Py_XDECREF(self->protocol_error);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject LedgerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mailrail._engine.CreditLedger",
    .tp_basicsize = sizeof(Ledger),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rank- or node-based credit accounting in C, with the interface and decisions of\n"
              "mailrail.flow's RankCredits / NodeCredits (the compiled path's flow control).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ledger_init,
    .tp_dealloc = (destructor)Ledger_dealloc,
    .tp_methods = Ledger_methods,
    .tp_members = Ledger_members,
    .tp_getset = Ledger_getset,
};

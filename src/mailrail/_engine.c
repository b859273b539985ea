/* mailrail._engine: MailRail's message path, compiled.
 *
 * The same transport as the Python one in rail.py:
 * a ring of persistent wildcard receives polled at its head, a send pool whose
 * slots keep a persistent request per repeated (destination, size), in-flight
 * sends reclaimed a few at a time from the oldest.  Four Python calls per
 * message cost ~2.5 us in the interpreter; here they cost a fraction of that.
 *
 * In the credit modes a compiled ledger (_ledger.c, the decisions of the
 * sans-I/O mailrail.flow classes) accounts every send, arrival and release, and
 * the engine polls and returns credit messages itself.  Python's Endpoint is
 * called only for what waits for credit: it queues a send that has none, and
 * drains the queues once credit comes back.
 *
 * No MPI header is needed: the MPI functions are the ones of the library
 * mpi4py loaded, resolved at run time by mailrail.fastpath (ctypes) and passed
 * in as addresses, together with the layout facts of that library (sizes of
 * MPI_Status and MPI_Request, offsets of MPI_SOURCE and MPI_TAG, handle
 * values).  Handles are passed as intptr_t: MPICH's int handles and Open MPI's
 * pointer handles both travel in one integer register.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_ledger.h"

typedef int (*test_fn)(void *request, int *flag, void *status);
typedef int (*start_fn)(void *request);
typedef int (*get_count_fn)(const void *status, intptr_t datatype, int *count);
typedef int (*isend_fn)(const void *buf, int count, intptr_t datatype, int dest, int tag, intptr_t comm,
                        void *request);
typedef int (*recv_init_fn)(void *buf, int count, intptr_t datatype, int source, int tag, intptr_t comm,
                            void *request);
typedef int (*request_fn)(void *request);
typedef int (*wait_fn)(void *request, void *status);
typedef int (*test_cancelled_fn)(const void *status, int *flag);

/* Room for any MPI_Request handle and any MPI_Status (checked at construction). */
#define REQUEST_BYTES 16
#define STATUS_BYTES 256

enum { FREE = 0, HELD = 1, QUEUED = 2, IN_FLIGHT = 3 };
static const char *STATE_NAMES[] = {"free", "reserved", "deferred", "in flight"};

typedef struct {
    unsigned char request[REQUEST_BYTES];
} Request;

typedef struct {
    int dest, nbytes;       /* the (destination, size) this slot sent last; dest -1: none */
    int persistent;         /* request holds a persistent send for (dest, nbytes) */
    int inflight_persistent;
    Request persistent_request;
    Request once_request;   /* Isend of a first (destination, size) */
} SendSlot;

/* ------------------------------------------------------------------ Message */

typedef struct {
    PyObject_HEAD
    int source;
    Py_ssize_t nbytes;
    PyObject *data;
    Py_ssize_t slot;
    PyObject *owner;
} Message;

static PyTypeObject MessageType;

static int Message_init(Message *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"source", "nbytes", "data", "slot", "owner", NULL};
    PyObject *data, *owner;
    int source;
    Py_ssize_t nbytes, slot;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "inOnO", keywords, &source, &nbytes, &data, &slot, &owner))
        return -1;
    self->source = source;
    self->nbytes = nbytes;
    Py_INCREF(data);
    Py_XSETREF(self->data, data);
    self->slot = slot;
    Py_INCREF(owner);
    Py_XSETREF(self->owner, owner);
    return 0;
}

static void Message_dealloc(Message *self) {
    Py_XDECREF(self->data);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Message_repr(Message *self) {
    if (self->slot < 0)
        return PyUnicode_FromFormat("Message(source=%d, nbytes=%zd, released)", self->source, self->nbytes);
    return PyUnicode_FromFormat("Message(source=%d, nbytes=%zd, slot %zd)", self->source, self->nbytes,
                                self->slot);
}

static PyMemberDef Message_members[] = {
    {"source", T_INT, offsetof(Message, source), READONLY, "rank that sent the message"},
    {"nbytes", T_PYSSIZET, offsetof(Message, nbytes), READONLY, "payload size in bytes"},
    {"data", T_OBJECT, offsetof(Message, data), READONLY,
     "read-only view of the payload inside the receive pool (valid until released)"},
    {"_slot", T_PYSSIZET, offsetof(Message, slot), 0, "receive slot; -1 once released"},
    {"_owner", T_OBJECT, offsetof(Message, owner), 0, "the object that received it"},
    {NULL},
};

static PyTypeObject MessageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mailrail.Message",
    .tp_basicsize = sizeof(Message),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An arrived message: ``data`` is a read-only view of ``nbytes`` bytes in the receive pool.\n\n"
              "Valid until MailRail.release_receive_buffer(); copy what must outlive it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Message_init,
    .tp_dealloc = (destructor)Message_dealloc,
    .tp_repr = (reprfunc)Message_repr,
    .tp_members = Message_members,
};

/* ------------------------------------------------------------------- Engine */

typedef struct {
    PyObject_HEAD
    /* MPI, resolved at run time */
    test_fn test;
    start_fn start;
    get_count_fn get_count;
    isend_fn isend, send_init;
    recv_init_fn recv_init;
    request_fn request_free, cancel;
    wait_fn wait;
    test_cancelled_fn test_cancelled;
    intptr_t comm, byte;
    int any_source, any_tag, source_offset, tag_offset;
    unsigned char status[STATUS_BYTES];
    /* Python objects */
    PyObject *send_views, *recv_views, *slot_by_id, *check_rank, *check_size, *slot_of;
    PyObject *finalized_error, *ownership_error, *release_error, *mpi_error;
    /* credit modes (ledger NULL when unconstrained): the ledger decides per message; Python's
     * Endpoint queues what has no credit (admit), and drains the queues (mark_ready, drain) */
    Ledger *ledger;
    PyObject *admit, *mark_ready, *drain;
    int deferred, progress_calls, progress_interval;
    intptr_t credit_comm;
    long long tag_ub;
    Request *credit_recv; /* ring of posted zero-byte receives for credit messages */
    int credit_receives, credit_head, credit_receives_made;
    Request *credit_send; /* ring of zero-byte credit returns in flight, grown on demand */
    int credit_send_head, credit_send_count, credit_send_capacity;
    PyObject **recv_cache;  /* per receive slot: a view of cached_nbytes bytes, or NULL */
    Py_ssize_t *cached_nbytes;
    char *send_base, *recv_base;
    int size, slot_size, send_slots, recv_slots, posted_limit;
    /* send side */
    unsigned char *send_state;
    SendSlot *send_slot;
    int *free_stack, free_count;
    int *inflight, inflight_head, inflight_count;
    int send_test_window, head_patience, head_waits;
    /* receive side */
    Request *recv_request;
    int *posted, posted_head, posted_count;
    int *unposted, unposted_count;
    Py_ssize_t held, held_high_water;
    int idle_calls, idle_spins;
    long idle_sleep_ns;
    int finalized, receives_made;
    /* counters */
    long long messages_sent, bytes_sent, messages_received, bytes_received, messages_released,
        reserve_failures, credit_messages_sent, credit_messages_received, credits_returned;
} Engine;

static char credit_buffer[1]; /* credit messages carry no payload (the count is the tag) */

/* Raise mpi4py's MPI.Exception for an MPI error code (its text names the error). */
static int mpi_failed(Engine *self, int code) {
    PyObject *error = PyObject_CallFunction(self->mpi_error, "i", code);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    return -1;
}

#define MPI_CALL(self, call)                         \
    do {                                             \
        int code_ = (call);                          \
        if (code_ != 0) return mpi_failed(self, code_); \
    } while (0)

static int post_receive(Engine *self, int slot) {
    MPI_CALL(self, self->start(self->recv_request[slot].request));
    self->posted[(self->posted_head + self->posted_count) % self->recv_slots] = slot;
    self->posted_count++;
    return 0;
}

static int reclaim_sends(Engine *self) {
    int budget = self->send_test_window, flag;
    while (self->inflight_count && budget) {
        int slot = self->inflight[self->inflight_head];
        SendSlot *s = &self->send_slot[slot];
        void *request = s->inflight_persistent ? s->persistent_request.request : s->once_request.request;
        MPI_CALL(self, self->test(request, &flag, self->status));
        if (!flag) {
            if (++self->head_waits >= self->head_patience) { /* rotate: a slow send must not pin the pool */
                self->head_waits = 0;
                self->inflight[(self->inflight_head + self->inflight_count) % self->send_slots] = slot;
                self->inflight_head = (self->inflight_head + 1) % self->send_slots;
            }
            return 0;
        }
        self->inflight_head = (self->inflight_head + 1) % self->send_slots;
        self->inflight_count--;
        self->head_waits = 0;
        self->send_state[slot] = FREE;
        self->free_stack[self->free_count++] = slot;
        budget--;
    }
    return 0;
}

static void idle(Engine *self) {
    if (++self->idle_calls < self->idle_spins) return;
    self->idle_calls = 0;
    Py_BEGIN_ALLOW_THREADS
    if (self->idle_sleep_ns > 0) {
        struct timespec pause = {self->idle_sleep_ns / 1000000000L, self->idle_sleep_ns % 1000000000L};
        nanosleep(&pause, NULL);
    } else {
        sched_yield();
    }
    Py_END_ALLOW_THREADS
}

static PyObject *finalized(Engine *self, const char *call) {
    PyErr_Format(self->finalized_error, "%s called after finalize()", call);
    return NULL;
}

static PyObject *Engine_reserve_send_buffer(Engine *self, PyObject *unused) {
    if (self->finalized) return finalized(self, "reserve_send_buffer()");
    if (!self->free_count && self->inflight_count && reclaim_sends(self) < 0) return NULL;
    if (!self->free_count) {
        self->reserve_failures++;
        Py_RETURN_NONE;
    }
    int slot = self->free_stack[--self->free_count];
    self->send_state[slot] = HELD;
    PyObject *view = PyList_GET_ITEM(self->send_views, slot);
    Py_INCREF(view);
    return view;
}

/* A rank or byte count: exact ints in range fast; anything else through the Python checker. */
static int checked_int(PyObject *value, long upper, PyObject *checker, long *out) {
    if (PyLong_CheckExact(value)) {
        int overflow;
        long v = PyLong_AsLongAndOverflow(value, &overflow);
        if (!overflow && v >= 0 && v <= upper) {
            *out = v;
            return 0;
        }
    }
    PyObject *checked = PyObject_CallOneArg(checker, value);
    if (checked == NULL) return -1;
    *out = PyLong_AsLong(checked);
    Py_DECREF(checked);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int send_slot_of(Engine *self, PyObject *buf) {
    PyObject *key = PyLong_FromVoidPtr(buf);
    if (key == NULL) return -1;
    PyObject *found = PyDict_GetItemWithError(self->slot_by_id, key);
    Py_DECREF(key);
    if (found != NULL) {
        long slot = PyLong_AsLong(found);
        if (PyList_GET_ITEM(self->send_views, slot) == buf) return (int)slot;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *slot = PyObject_CallOneArg(self->slot_of, buf); /* a view at a slot's start, or None */
    if (slot == NULL) return -1;
    if (slot == Py_None) {
        Py_DECREF(slot);
        PyErr_Format(self->ownership_error,
                     "the buffer passed to send() (type %s) was not reserved from this MailRail's send pool: "
                     "use reserve_send_buffer()", Py_TYPE(buf)->tp_name);
        return -1;
    }
    long value = PyLong_AsLong(slot);
    Py_DECREF(slot);
    return (int)value;
}

static int transmit(Engine *self, int dest, int slot, int nbytes, int tag) {
    SendSlot *s = &self->send_slot[slot];
    char *buf = self->send_base + (Py_ssize_t)slot * self->slot_size;
    if (tag != 0) { /* piggybacked credits: a one-off send that leaves the slot's cache alone */
        MPI_CALL(self, self->isend(buf, nbytes, self->byte, dest, tag, self->comm,
                                                s->once_request.request));
        s->inflight_persistent = 0;
    } else if (s->dest == dest && s->nbytes == nbytes) {
        /* The second time a slot repeats (destination, size): persistent from then on. */
        if (!s->persistent) {
            MPI_CALL(self, self->send_init(buf, nbytes, self->byte, dest, 0, self->comm,
                                                            s->persistent_request.request));
            s->persistent = 1;
        }
        MPI_CALL(self, self->start(s->persistent_request.request));
        s->inflight_persistent = 1;
    } else {
        if (s->persistent) {
            MPI_CALL(self, self->request_free(s->persistent_request.request));
            s->persistent = 0;
        }
        s->dest = dest;
        s->nbytes = nbytes;
        MPI_CALL(self, self->isend(buf, nbytes, self->byte, dest, 0, self->comm,
                                                s->once_request.request));
        s->inflight_persistent = 0;
    }
    self->inflight[(self->inflight_head + self->inflight_count) % self->send_slots] = slot;
    self->inflight_count++;
    return 0;
}

/* Credit modes, short of credit or with sends already waiting: the Endpoint decides, in FIFO order
 * per destination.  Sets *tag to the tag to leave with now, or -1: queued until credit arrives. */
static int call_admit(Engine *self, long dest, int slot, long nbytes, long *tag) {
    PyObject *decision = PyObject_CallFunction(self->admit, "lil", dest, slot, nbytes);
    if (decision == NULL) return -1;
    *tag = PyLong_AsLong(decision);
    Py_DECREF(decision);
    return (*tag == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *Engine_send(Engine *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "send() takes dest, buf, nbytes (%zd arguments given)", nargs);
        return NULL;
    }
    if (self->finalized) {
        PyErr_Format(self->finalized_error, "send(dest=%R) called after finalize()", args[0]);
        return NULL;
    }
    long dest, nbytes;
    if (checked_int(args[0], self->size - 1, self->check_rank, &dest) < 0) return NULL;
    if (checked_int(args[2], self->slot_size, self->check_size, &nbytes) < 0) return NULL;
    int slot = send_slot_of(self, args[1]);
    if (slot < 0) return NULL;
    if (self->send_state[slot] != HELD) {
        PyErr_Format(self->ownership_error,
                     "send buffer slot %d is %s, not reserved: a buffer is sent once per reserve_send_buffer()",
                     slot, STATE_NAMES[self->send_state[slot]]);
        return NULL;
    }
    self->messages_sent++;
    self->bytes_sent += nbytes;
    self->idle_calls = 0; /* a rank that sends is busy, not idle */
    long tag = 0;
    if (self->ledger != NULL) {
        if (!self->deferred && ledger_try_acquire(self->ledger, (int)dest)) {
            tag = (long)ledger_take_piggyback(self->ledger, (int)dest);
        } else {
            if (call_admit(self, dest, slot, nbytes, &tag) < 0) return NULL;
            if (tag < 0) {
                self->send_state[slot] = QUEUED;
                self->deferred++;
                Py_RETURN_NONE;
            }
        }
    }
    self->send_state[slot] = IN_FLIGHT;
    if (transmit(self, (int)dest, slot, (int)nbytes, (int)tag) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Credit came back for source: its queued sends are worth a look at the next drain. */
static int call_mark_ready(Engine *self, int source) {
    PyObject *done = PyObject_CallFunction(self->mark_ready, "i", source);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* Ask the Endpoint for queued sends that have credit now, as (dest, slot, nbytes, tag) tuples. */
static int drain_deferred(Engine *self) {
    PyObject *ready = PyObject_CallNoArgs(self->drain);
    if (ready == NULL) return -1;
    if (!PyList_Check(ready)) {
        Py_DECREF(ready);
        PyErr_SetString(PyExc_TypeError, "the drain hook must return a list");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ready); i++) {
        int dest, slot, nbytes, tag;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(ready, i), "iiii", &dest, &slot, &nbytes, &tag)) {
            Py_DECREF(ready);
            return -1;
        }
        if (slot < 0 || slot >= self->send_slots || self->send_state[slot] != QUEUED) {
            Py_DECREF(ready);
            PyErr_Format(PyExc_RuntimeError, "the drain hook released send slot %d, which is not deferred", slot);
            return -1;
        }
        self->send_state[slot] = IN_FLIGHT;
        self->deferred--;
        if (transmit(self, dest, slot, nbytes, tag) < 0) {
            Py_DECREF(ready);
            return -1;
        }
    }
    Py_DECREF(ready);
    return 0;
}

/* The oldest posted credit receive, if its message arrived: 1 with its source and count (the receive
 * is re-posted), 0 if none arrived, -1 on an MPI error. */
static int next_credit_message(Engine *self, int *source, int *count) {
    int flag;
    void *request = self->credit_recv[self->credit_head].request;
    MPI_CALL(self, self->test(request, &flag, self->status));
    if (!flag) return 0;
    *source = *(int *)(self->status + self->source_offset);
    *count = *(int *)(self->status + self->tag_offset);
    MPI_CALL(self, self->start(request));
    self->credit_head = (self->credit_head + 1) % self->credit_receives;
    return 1;
}

/* Apply every credit message that arrived, oldest posted receive first. */
static int poll_credits(Engine *self) {
    int source, count, arrived;
    while ((arrived = next_credit_message(self, &source, &count)) > 0) {
        self->credit_messages_received++;
        if (ledger_on_credit_return(self->ledger, source, count) < 0) return -1;
        /* Node credits change silently (any local rank may refill them): drains poll instead. */
        if (self->deferred && !self->ledger->node_mode && call_mark_ready(self, source) < 0) return -1;
    }
    return arrived;
}

static int grow_credit_sends(Engine *self) {
    int capacity = self->credit_send_capacity ? 2 * self->credit_send_capacity : 16;
    Request *ring = PyMem_Calloc(capacity, sizeof(Request));
    if (ring == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < self->credit_send_count; i++)
        ring[i] = self->credit_send[(self->credit_send_head + i) % self->credit_send_capacity];
    PyMem_Free(self->credit_send);
    self->credit_send = ring;
    self->credit_send_head = 0;
    self->credit_send_capacity = capacity;
    return 0;
}

/* Send count credits back to target: zero-byte messages, the count in the tag (in pieces above tag_ub). */
static int return_credits(Engine *self, int target, long long count) {
    self->credit_messages_sent++;
    self->credits_returned += count;
    while (count > 0) {
        long long part = count < self->tag_ub ? count : self->tag_ub;
        if (self->credit_send_count == self->credit_send_capacity && grow_credit_sends(self) < 0) return -1;
        Request *request = &self->credit_send[(self->credit_send_head + self->credit_send_count) %
                                              self->credit_send_capacity];
        MPI_CALL(self, self->isend(credit_buffer, 0, self->byte, target, (int)part, self->credit_comm,
                                   request->request));
        self->credit_send_count++;
        count -= part;
    }
    int flag;
    while (self->credit_send_count) { /* forget completed returns, oldest first */
        MPI_CALL(self, self->test(self->credit_send[self->credit_send_head].request, &flag, self->status));
        if (!flag) break;
        self->credit_send_head = (self->credit_send_head + 1) % self->credit_send_capacity;
        self->credit_send_count--;
    }
    return 0;
}

static PyObject *payload_view(Engine *self, int slot, Py_ssize_t nbytes) {
    PyObject *full = PyList_GET_ITEM(self->recv_views, slot);
    if (nbytes == self->slot_size) {
        Py_INCREF(full);
        return full;
    }
    if (self->recv_cache[slot] == NULL || self->cached_nbytes[slot] != nbytes) {
        PyObject *view = PySequence_GetSlice(full, 0, nbytes);
        if (view == NULL) return NULL;
        Py_XSETREF(self->recv_cache[slot], view);
        self->cached_nbytes[slot] = nbytes;
    }
    Py_INCREF(self->recv_cache[slot]);
    return self->recv_cache[slot];
}

static PyObject *Engine_receive(Engine *self, PyObject *unused) {
    if (self->finalized) return finalized(self, "receive()");
    if (self->inflight_count && reclaim_sends(self) < 0) return NULL;
    /* Credit messages are polled every few calls (every MPI test drives progress and contends for
     * the shared-memory queues), and on every call while sends wait for credit. */
    if (self->ledger != NULL && (self->deferred || ++self->progress_calls >= self->progress_interval)) {
        self->progress_calls = 0;
        if (poll_credits(self) < 0 || (self->deferred && drain_deferred(self) < 0)) return NULL;
    }
    if (self->posted_count) {
        int slot = self->posted[self->posted_head], flag, count;
        int code = self->test(self->recv_request[slot].request, &flag, self->status);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
        if (flag) {
            self->posted_head = (self->posted_head + 1) % self->recv_slots;
            self->posted_count--;
            int source = *(int *)(self->status + self->source_offset);
            code = self->get_count(self->status, self->byte, &count);
            if (code != 0) {
                mpi_failed(self, code);
                return NULL;
            }
            self->messages_received++;
            self->bytes_received += count;
            if (self->ledger != NULL) {
                int brought = ledger_on_arrival(self->ledger, source, *(int *)(self->status + self->tag_offset));
                if (brought < 0 || (brought && self->deferred && call_mark_ready(self, source) < 0)) return NULL;
            }
            if (++self->held > self->held_high_water) self->held_high_water = self->held;
            if (self->unposted_count && post_receive(self, self->unposted[--self->unposted_count]) < 0)
                return NULL;
            self->idle_calls = 0;
            PyObject *data = payload_view(self, slot, count);
            if (data == NULL) return NULL;
            Message *message = PyObject_New(Message, &MessageType);
            if (message == NULL) {
                Py_DECREF(data);
                return NULL;
            }
            message->source = source;
            message->nbytes = count;
            message->data = data;
            message->slot = slot;
            Py_INCREF(self);
            message->owner = (PyObject *)self;
            return (PyObject *)message;
        }
    }
    idle(self);
    Py_RETURN_NONE;
}

static PyObject *Engine_release_receive_buffer(Engine *self, PyObject *arg) {
    if (self->finalized) return finalized(self, "release_receive_buffer()");
    if (Py_TYPE(arg) != &MessageType || ((Message *)arg)->owner != (PyObject *)self) {
        PyErr_Format(self->release_error, "%R is not a message received from this MailRail", arg);
        return NULL;
    }
    Message *message = (Message *)arg;
    if (message->slot < 0) {
        PyErr_Format(self->release_error, "%R was already released", arg);
        return NULL;
    }
    int slot = (int)message->slot;
    message->slot = -1;
    self->held--;
    self->messages_released++;
    if (self->posted_count < self->posted_limit) {
        if (post_receive(self, slot) < 0) return NULL;
    } else {
        self->unposted[self->unposted_count++] = slot;
    }
    if (self->ledger != NULL) {
        long long count = ledger_on_release(self->ledger, message->source);
        if (count && return_credits(self, message->source, count) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Engine_pending_sends(Engine *self, PyObject *unused) {
    return PyLong_FromLong(self->inflight_count + self->deferred);
}

static PyObject *Engine_reclaim_sends(Engine *self, PyObject *unused) {
    if (reclaim_sends(self) < 0) return NULL;
    return PyLong_FromLong(self->inflight_count);
}

static PyObject *Engine_discard_arrivals(Engine *self, PyObject *unused) {
    long count = 0;
    int flag;
    while (self->posted_count) {
        int slot = self->posted[self->posted_head];
        int code = self->test(self->recv_request[slot].request, &flag, self->status);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
        if (!flag) break;
        self->posted_head = (self->posted_head + 1) % self->recv_slots;
        self->posted_count--;
        if (post_receive(self, slot) < 0) return NULL;
        count++;
    }
    if (self->credit_receives_made) { /* credit messages too: drop them */
        int source, credits, arrived;
        while ((arrived = next_credit_message(self, &source, &credits)) > 0) continue;
        if (arrived < 0) return NULL;
    }
    return PyLong_FromLong(count);
}

/* Cancel every posted receive; count those that had already matched a message. */
static PyObject *Engine_cancel_receives(Engine *self, PyObject *unused) {
    long matched = 0;
    int cancelled;
    while (self->posted_count) {
        void *request = self->recv_request[self->posted[self->posted_head]].request;
        self->posted_head = (self->posted_head + 1) % self->recv_slots;
        self->posted_count--;
        int code = self->cancel(request);
        if (code == 0) code = self->wait(request, self->status);
        if (code == 0) code = self->test_cancelled(self->status, &cancelled);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
        if (!cancelled && *(int *)(self->status + self->source_offset) != self->any_source) matched++;
    }
    for (int i = 0; i < self->credit_receives_made; i++) { /* credit receives: nothing to count */
        void *request = self->credit_recv[i].request;
        int code = self->cancel(request);
        if (code == 0) code = self->wait(request, self->status);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
    }
    return PyLong_FromLong(matched);
}

/* Free every request (sends must have completed: reclaim them first). */
static PyObject *Engine_free(Engine *self, PyObject *unused) {
    if (self->inflight_count) {
        PyErr_Format(PyExc_RuntimeError, "free() with %d send(s) in flight", self->inflight_count);
        return NULL;
    }
    for (int slot = 0; slot < self->send_slots; slot++) {
        SendSlot *s = &self->send_slot[slot];
        int code = s->persistent ? self->request_free(s->persistent_request.request) : 0;
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
        s->persistent = 0;
        s->dest = -1;
    }
    for (int slot = 0; slot < self->receives_made; slot++) {
        int code = self->request_free(self->recv_request[slot].request);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
    }
    self->receives_made = 0;
    self->posted_count = 0;
    for (; self->credit_receives_made; self->credit_receives_made--) {
        int code = self->request_free(self->credit_recv[self->credit_receives_made - 1].request);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
    }
    for (; self->credit_send_count; self->credit_send_count--) { /* zero-byte sends: they complete */
        int code = self->wait(self->credit_send[self->credit_send_head].request, self->status);
        if (code != 0) {
            mpi_failed(self, code);
            return NULL;
        }
        self->credit_send_head = (self->credit_send_head + 1) % self->credit_send_capacity;
    }
    self->deferred = 0; /* finalize() dropped them (and reported how many) */
    self->finalized = 1;
    /* The hooks are bound methods of the MailRail that holds this engine: break the cycle. */
    Py_CLEAR(self->admit);
    Py_CLEAR(self->mark_ready);
    Py_CLEAR(self->drain);
    Py_RETURN_NONE;
}

static PyObject *Engine_counters(Engine *self, PyObject *unused) {
    return Py_BuildValue("{sLsLsLsLsLsLsnsnsisLsLsL}", "messages_sent", self->messages_sent, "bytes_sent",
                         self->bytes_sent, "messages_received", self->messages_received, "bytes_received",
                         self->bytes_received, "messages_released", self->messages_released,
                         "reserve_failures", self->reserve_failures, "held", self->held, "held_high_water",
                         self->held_high_water, "in_flight", self->inflight_count, "credit_messages_sent",
                         self->credit_messages_sent, "credit_messages_received", self->credit_messages_received,
                         "credits_returned", self->credits_returned);
}

static void *address(PyObject *addresses, const char *name) {
    PyObject *value = PyDict_GetItemString(addresses, name);
    if (value == NULL) {
        PyErr_Format(PyExc_KeyError, "MPI function %s not resolved", name);
        return NULL;
    }
    return PyLong_AsVoidPtr(value);
}

static int Engine_init(Engine *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"functions", "layout", "send_views", "send_base", "slot_by_id", "slot_of",
                               "recv_views", "recv_base", "posted_receives", "size", "check_rank",
                               "check_size", "errors", "tuning", "credits", NULL};
    PyObject *functions, *layout, *send_views, *send_base, *slot_by_id, *slot_of, *recv_views, *recv_base,
        *check_rank, *check_size, *errors, *tuning, *credits = Py_None;
    int posted_receives, size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!OO!OO!OiiOOO!O!|O", keywords, &PyDict_Type, &functions,
                                     &PyDict_Type, &layout, &PyList_Type, &send_views, &send_base,
                                     &PyDict_Type, &slot_by_id, &slot_of, &PyList_Type, &recv_views,
                                     &recv_base, &posted_receives, &size, &check_rank, &check_size,
                                     &PyTuple_Type, &errors, &PyDict_Type, &tuning, &credits))
        return -1;
    if (self->send_views != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is initialized once");
        return -1;
    }
    if (!(self->test = (test_fn)address(functions, "MPI_Test")) ||
        !(self->start = (start_fn)address(functions, "MPI_Start")) ||
        !(self->get_count = (get_count_fn)address(functions, "MPI_Get_count")) ||
        !(self->isend = (isend_fn)address(functions, "MPI_Isend")) ||
        !(self->send_init = (isend_fn)address(functions, "MPI_Send_init")) ||
        !(self->recv_init = (recv_init_fn)address(functions, "MPI_Recv_init")) ||
        !(self->request_free = (request_fn)address(functions, "MPI_Request_free")) ||
        !(self->cancel = (request_fn)address(functions, "MPI_Cancel")) ||
        !(self->wait = (wait_fn)address(functions, "MPI_Wait")) ||
        !(self->test_cancelled = (test_cancelled_fn)address(functions, "MPI_Test_cancelled")))
        return -1;
    long status_size, request_size, slot_size;
#define LAYOUT(field, var)                                                           \
    do {                                                                             \
        PyObject *v_ = PyDict_GetItemString(layout, field);                          \
        if (v_ == NULL) { PyErr_Format(PyExc_KeyError, "layout lacks %s", field); return -1; } \
        var = PyLong_AsLongLong(v_);                                                 \
        if (PyErr_Occurred()) return -1;                                             \
    } while (0)
    long long value;
    LAYOUT("status_size", value); status_size = (long)value;
    LAYOUT("request_size", value); request_size = (long)value;
    LAYOUT("source_offset", value); self->source_offset = (int)value;
    LAYOUT("tag_offset", value); self->tag_offset = (int)value;
    LAYOUT("comm", value); self->comm = (intptr_t)value;
    LAYOUT("byte", value); self->byte = (intptr_t)value;
    LAYOUT("any_source", value); self->any_source = (int)value;
    LAYOUT("any_tag", value); self->any_tag = (int)value;
    LAYOUT("slot_size", value); slot_size = (long)value;
    if (status_size > STATUS_BYTES || request_size > REQUEST_BYTES || self->source_offset < 0 ||
        self->source_offset + 4 > status_size || self->tag_offset < 0 || self->tag_offset + 4 > status_size || slot_size < 1 || slot_size > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "unsupported MPI layout (status %ld B, request %ld B, slot %ld B)",
                     status_size, request_size, slot_size);
        return -1;
    }
    self->slot_size = (int)slot_size;
    PyObject *v;
#define TUNING(field, var)                                                             \
    do {                                                                               \
        v = PyDict_GetItemString(tuning, field);                                       \
        if (v == NULL) { PyErr_Format(PyExc_KeyError, "tuning lacks %s", field); return -1; } \
        var = PyLong_AsLong(v);                                                        \
        if (PyErr_Occurred()) return -1;                                               \
    } while (0)
    TUNING("send_test_window", self->send_test_window);
    TUNING("head_patience", self->head_patience);
    TUNING("idle_spins", self->idle_spins);
    TUNING("idle_sleep_ns", self->idle_sleep_ns);
    TUNING("progress_interval", self->progress_interval);
    TUNING("credit_receives", self->credit_receives);
    if (credits != Py_None) { /* credit modes: {ledger, comm, tag_ub, admit, mark_ready, drain} */
        PyObject *ledger, *comm, *tag_ub, *admit, *mark_ready, *drain;
        if (!PyDict_Check(credits) || !(ledger = PyDict_GetItemString(credits, "ledger")) ||
            !PyObject_TypeCheck(ledger, &LedgerType) || !(comm = PyDict_GetItemString(credits, "comm")) ||
            !(tag_ub = PyDict_GetItemString(credits, "tag_ub")) ||
            !(admit = PyDict_GetItemString(credits, "admit")) ||
            !(mark_ready = PyDict_GetItemString(credits, "mark_ready")) ||
            !(drain = PyDict_GetItemString(credits, "drain"))) {
            PyErr_SetString(PyExc_ValueError,
                            "credits: None or {ledger: CreditLedger, comm, tag_ub, admit, mark_ready, drain}");
            return -1;
        }
        self->credit_comm = (intptr_t)PyLong_AsSsize_t(comm);
        self->tag_ub = PyLong_AsLongLong(tag_ub);
        if (PyErr_Occurred()) return -1;
        if (self->tag_ub < 1 || self->tag_ub > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "tag_ub %lld out of range", self->tag_ub);
            return -1;
        }
        self->ledger = (Ledger *)Py_NewRef(ledger);
        self->admit = Py_NewRef(admit);
        self->mark_ready = Py_NewRef(mark_ready);
        self->drain = Py_NewRef(drain);
    }
    if (PyTuple_GET_SIZE(errors) != 4) {
        PyErr_SetString(PyExc_ValueError, "errors: (finalized, ownership, release, mpi)");
        return -1;
    }
    self->size = size;
    self->send_slots = (int)PyList_GET_SIZE(send_views);
    self->recv_slots = (int)PyList_GET_SIZE(recv_views);
    self->posted_limit = posted_receives;
    if (self->send_slots < 1 || self->recv_slots < 1 || posted_receives < 1 || posted_receives > self->recv_slots) {
        PyErr_SetString(PyExc_ValueError, "pools need >= 1 slot and 1 <= posted_receives <= receive slots");
        return -1;
    }
    self->send_base = PyLong_AsVoidPtr(send_base);
    self->recv_base = PyLong_AsVoidPtr(recv_base);
    if (PyErr_Occurred()) return -1;
    Py_INCREF(send_views); self->send_views = send_views;
    Py_INCREF(recv_views); self->recv_views = recv_views;
    Py_INCREF(slot_by_id); self->slot_by_id = slot_by_id;
    Py_INCREF(slot_of); self->slot_of = slot_of;
    Py_INCREF(check_rank); self->check_rank = check_rank;
    Py_INCREF(check_size); self->check_size = check_size;
    self->finalized_error = Py_NewRef(PyTuple_GET_ITEM(errors, 0));
    self->ownership_error = Py_NewRef(PyTuple_GET_ITEM(errors, 1));
    self->release_error = Py_NewRef(PyTuple_GET_ITEM(errors, 2));
    self->mpi_error = Py_NewRef(PyTuple_GET_ITEM(errors, 3));

    self->send_state = PyMem_Calloc(self->send_slots, 1);
    self->send_slot = PyMem_Calloc(self->send_slots, sizeof(SendSlot));
    self->free_stack = PyMem_Calloc(self->send_slots, sizeof(int));
    self->inflight = PyMem_Calloc(self->send_slots, sizeof(int));
    self->recv_request = PyMem_Calloc(self->recv_slots, sizeof(Request));
    self->posted = PyMem_Calloc(self->recv_slots, sizeof(int));
    self->unposted = PyMem_Calloc(self->recv_slots, sizeof(int));
    self->recv_cache = PyMem_Calloc(self->recv_slots, sizeof(PyObject *));
    self->cached_nbytes = PyMem_Calloc(self->recv_slots, sizeof(Py_ssize_t));
    if (!self->send_state || !self->send_slot || !self->free_stack || !self->inflight || !self->recv_request ||
        !self->posted || !self->unposted || !self->recv_cache || !self->cached_nbytes) {
        PyErr_NoMemory();
        return -1;
    }
    for (int slot = 0; slot < self->send_slots; slot++) {
        self->send_slot[slot].dest = -1;
        self->free_stack[slot] = self->send_slots - 1 - slot; /* lowest slot on top: hot slots stay cached */
    }
    self->free_count = self->send_slots;
    for (int slot = 0; slot < self->recv_slots; slot++) {
        MPI_CALL(self, self->recv_init(self->recv_base + (Py_ssize_t)slot * self->slot_size, self->slot_size,
                                 self->byte, self->any_source, self->any_tag, self->comm,
                                 self->recv_request[slot].request));
        self->receives_made = slot + 1;
    }
    for (int slot = 0; slot < posted_receives; slot++)
        if (post_receive(self, slot) < 0) return -1;
    if (self->ledger != NULL) {
        if (self->credit_receives < 1) {
            PyErr_SetString(PyExc_ValueError, "credit modes need credit_receives >= 1");
            return -1;
        }
        self->credit_recv = PyMem_Calloc(self->credit_receives, sizeof(Request));
        if (self->credit_recv == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    for (int i = 0; self->ledger != NULL && i < self->credit_receives; i++) {
        void *request = self->credit_recv[i].request;
        MPI_CALL(self, self->recv_init(credit_buffer, 0, self->byte, self->any_source, self->any_tag,
                                       self->credit_comm, request));
        self->credit_receives_made = i + 1;
        MPI_CALL(self, self->start(request));
    }
    /* Slots beyond the posted limit wait, unposted, until a posted one is taken. */
    for (int slot = self->recv_slots - 1; slot >= posted_receives; slot--)
        self->unposted[self->unposted_count++] = slot;
    return 0;
}

static void Engine_dealloc(Engine *self) {
    Py_XDECREF(self->send_views);
    Py_XDECREF(self->recv_views);
    Py_XDECREF(self->slot_by_id);
    Py_XDECREF(self->slot_of);
    Py_XDECREF(self->check_rank);
    Py_XDECREF(self->check_size);
    Py_XDECREF(self->finalized_error);
    Py_XDECREF(self->ownership_error);
    Py_XDECREF(self->release_error);
    Py_XDECREF(self->mpi_error);
    Py_XDECREF((PyObject *)self->ledger);
    Py_XDECREF(self->admit);
    Py_XDECREF(self->mark_ready);
    Py_XDECREF(self->drain);
    PyMem_Free(self->credit_send);
    PyMem_Free(self->credit_recv);
    if (self->recv_cache != NULL)
        for (int slot = 0; slot < self->recv_slots; slot++) Py_XDECREF(self->recv_cache[slot]);
    PyMem_Free(self->recv_cache);
    PyMem_Free(self->cached_nbytes);
    PyMem_Free(self->send_state);
    PyMem_Free(self->send_slot);
    PyMem_Free(self->free_stack);
    PyMem_Free(self->inflight);
    PyMem_Free(self->recv_request);
    PyMem_Free(self->posted);
    PyMem_Free(self->unposted);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Engine_get_held(Engine *self, void *closure) { return PyLong_FromSsize_t(self->held); }
static PyObject *Engine_get_finalized(Engine *self, void *closure) { return PyBool_FromLong(self->finalized); }
static int Engine_set_finalized(Engine *self, PyObject *value, void *closure) {
    int truth = PyObject_IsTrue(value);
    if (truth < 0) return -1;
    self->finalized = truth;
    return 0;
}

static PyGetSetDef Engine_getset[] = {
    {"held", (getter)Engine_get_held, NULL, "messages handed out and not yet released", NULL},
    {"finalized", (getter)Engine_get_finalized, (setter)Engine_set_finalized, "calls raise once set", NULL},
    {NULL},
};

static PyMethodDef Engine_methods[] = {
    {"reserve_send_buffer", (PyCFunction)Engine_reserve_send_buffer, METH_NOARGS, NULL},
    {"send", (PyCFunction)(void (*)(void))Engine_send, METH_FASTCALL, NULL},
    {"receive", (PyCFunction)Engine_receive, METH_NOARGS, NULL},
    {"release_receive_buffer", (PyCFunction)Engine_release_receive_buffer, METH_O, NULL},
    {"pending_sends", (PyCFunction)Engine_pending_sends, METH_NOARGS, "sends in flight"},
    {"reclaim_sends", (PyCFunction)Engine_reclaim_sends, METH_NOARGS, "reclaim completed sends; returns those left"},
    {"discard_arrivals", (PyCFunction)Engine_discard_arrivals, METH_NOARGS,
     "re-post arrived messages without handing them out; returns how many"},
    {"cancel_receives", (PyCFunction)Engine_cancel_receives, METH_NOARGS,
     "cancel posted receives; returns how many had matched a message"},
    {"free", (PyCFunction)Engine_free, METH_NOARGS, "free every MPI request"},
    {"counters", (PyCFunction)Engine_counters, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mailrail._engine.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The message path of one MailRail (see mailrail.fastpath).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mailrail._engine",
                                    "MailRail's compiled message path.", -1, NULL};

PyMODINIT_FUNC PyInit__engine(void) {
    if (PyType_Ready(&MessageType) < 0 || PyType_Ready(&EngineType) < 0 || PyType_Ready(&LedgerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Message", (PyObject *)&MessageType) < 0 ||
        PyModule_AddObjectRef(m, "Engine", (PyObject *)&EngineType) < 0 ||
        PyModule_AddObjectRef(m, "CreditLedger", (PyObject *)&LedgerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

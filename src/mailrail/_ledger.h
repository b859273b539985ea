/* The compiled credit ledger: rank- and node-based credit accounting for the compiled message path.
 *
 * It makes exactly the decisions of mailrail.flow.rank.RankCredits and mailrail.flow.node.NodeCredits
 * (the sans-I/O reference, which the Python path runs), with the same errors; tests/flow/test_ledger.py
 * drives both with the same random events and compares every result.  The engine calls the ledger_*
 * functions per message; Python (the Endpoint's slow paths, stats) calls the same logic as methods.
 */
#ifndef MAILRAIL_LEDGER_H
#define MAILRAIL_LEDGER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    int node_mode;              /* 0: credits per sender rank; 1: per sending node, pooled in shared memory */
    int ranks, groups;          /* groups: the unit credits are counted per (ranks, or nodes) */
    long long credits_per_pair, return_threshold, max_tag;
    int piggyback;
    int64_t *credits;           /* sender side, per destination rank: private (rank) or node-shared (node) */
    const int32_t *group_map;   /* node mode on real nodes: rank -> node, in node-shared memory */
    int ranks_per_group;        /* otherwise: group = rank / ranks_per_group */
    int64_t *owed, *unreturned; /* receiver side, per group: released / arrived, not yet returned */
    long long unreturned_total, unreturned_high_water, piggybacked;
    PyObject *protocol_error;
    PyObject *owner;            /* keeps the memory behind credits/group_map alive (node mode) */
} Ledger;

extern PyTypeObject LedgerType;

/* Take one credit for dest: 1 taken, 0 none left. */
int ledger_try_acquire(Ledger *ledger, int dest);
/* Credits owed to dest that ride in the tag of a payload leaving for it now (rank mode). */
long long ledger_take_piggyback(Ledger *ledger, int dest);
/* Account one payload from source: 1 if its tag brought credits, 0 if not, -1 on a protocol error. */
int ledger_on_arrival(Ledger *ledger, int source, long long tag);
/* The application released a payload from source: the credits to return to source now (0: none yet). */
long long ledger_on_release(Ledger *ledger, int source);
/* A credit message from source returned count credits: 0, or -1 on a protocol error. */
int ledger_on_credit_return(Ledger *ledger, int source, long long count);

#endif

/* The election handle, shared by election.c (the public calls, the engines'
 * own election tables, listeners) and election_gen.c (the election the core
 * builds on a lock plus a value for engines without an election table). */
#ifndef BATON_CORE_ELECTION_H
#define BATON_CORE_ELECTION_H

#include "sync.h"

/* The reserved prefix of the names a generic election uses: the candidate
 * lock "baton:election:NAME" and the leader record, the value of that same
 * name. Lock and value names starting with it are the elections'. */
#define BATON__ELECTION_PREFIX "baton:election:"

struct baton_election {
    baton_client *c;
    baton_lock *l;                              /* the candidacy */
    char *name;                                 /* the election's name, as given */
    baton_election_options opts;
    char value[BATON_ELECTION_VALUE_MAX + 1];   /* proclaimed while leading */
    baton_waiter ow;                            /* observe's parking spot */
    pthread_mutex_t omu;                        /* one observer at a time */
    int observed;                               /* observe answered once */
    int observing;                              /* an observe is in flight (atomic) */
    uint64_t known_fence;
    char known_value[BATON_ELECTION_VALUE_MAX + 1];
    /* generic elections (no election table): the leader record */
    int generic;
    baton_value *rec;
    /* the lock's own member cancel, which ours wraps (close wakes observers) */
    void (*lock_cancel)(baton__member *m);
    /* the lock's member functions with ours for cancel, while hooked */
    const baton__member_ops *lock_ops;
    baton__member_ops hooked_ops;
    /* the listener */
    pthread_mutex_t lmu;
    pthread_t lthread;
    int listening;
    int lstop;
    baton_waiter lw;
    baton_value *lrec;                          /* its own record handle (generic) */
    baton_election_cb lcb;
    void *lpayload;
};

/* Generic elections (election_gen.c). */
int baton__gelect_open(baton_election *e, const baton_lock_options *lo);
/* After a grant: writes the leader record, or gives the grant back. */
int baton__gelect_granted(baton_election *e);
int baton__gelect_proclaim(baton_election *e, const char *value);
/* Clears the record of the term this candidate holds (before its release). */
void baton__gelect_clear(baton_election *e);
/* The backend's leader() contract, answered from the lock and the record
 * REC (the election's own, or the listener's). */
int baton__gelect_leader(baton_election *e, baton_value *rec, uint64_t known_fence, const char *known_value,
                         char *value, size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w);

#endif

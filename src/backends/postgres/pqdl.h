/*
 * libpq, loaded on the first postgres:// open (pqdl.c) instead of linked:
 * linking it adds krb5, ldap, gnutls and some twenty other shared libraries
 * to every program that links baton, and ~11 ms to every `baton` start,
 * whatever engine it then uses.
 *
 * Include this (pg_int.h does) instead of <libpq-fe.h>: the PQ* names the
 * backend uses become calls through the table. Only types and constants
 * come from the headers; the binaries do not link libpq.
 */
#ifndef BATON_PG_PQDL_H
#define BATON_PG_PQDL_H

#include <libpq-fe.h>
#include <libpq-events.h>

/* Every libpq function the backend calls, and nothing else: a new call
 * needs a line here and one below (the build fails without the second,
 * at link time: libpq is not linked). */
#define PQDL_FUNCS(X)                                                                               \
    X(int, PQcancel, (PGcancel *, char *, int))                                                     \
    X(void, PQclear, (PGresult *))                                                                  \
    X(char *, PQcmdStatus, (PGresult *))                                                            \
    X(char *, PQcmdTuples, (PGresult *))                                                            \
    X(PostgresPollingStatusType, PQconnectPoll, (PGconn *))                                         \
    X(PGconn *, PQconnectStartParams, (const char *const *, const char *const *, int))              \
    X(int, PQconnectionNeedsPassword, (const PGconn *))                                             \
    X(int, PQconsumeInput, (PGconn *))                                                              \
    X(char *, PQdb, (const PGconn *))                                                               \
    X(char *, PQerrorMessage, (const PGconn *))                                                     \
    X(char *, PQescapeIdentifier, (PGconn *, const char *, size_t))                                 \
    X(void, PQfinish, (PGconn *))                                                                   \
    X(void, PQfreeCancel, (PGcancel *))                                                             \
    X(void, PQfreemem, (void *))                                                                    \
    X(PGcancel *, PQgetCancel, (PGconn *))                                                          \
    X(PGresult *, PQgetResult, (PGconn *))                                                          \
    X(int, PQgetisnull, (const PGresult *, int, int))                                               \
    X(char *, PQgetvalue, (const PGresult *, int, int))                                             \
    X(char *, PQhost, (const PGconn *))                                                             \
    X(void *, PQinstanceData, (const PGconn *, PGEventProc))                                        \
    X(int, PQisBusy, (PGconn *))                                                                    \
    X(int, PQnfields, (const PGresult *))                                                           \
    X(PGnotify *, PQnotifies, (PGconn *))                                                           \
    X(int, PQntuples, (const PGresult *))                                                           \
    X(char *, PQport, (const PGconn *))                                                             \
    X(int, PQregisterEventProc, (PGconn *, PGEventProc, const char *, void *))                      \
    X(char *, PQresultErrorField, (const PGresult *, int))                                          \
    X(char *, PQresultErrorMessage, (const PGresult *))                                             \
    X(ExecStatusType, PQresultStatus, (const PGresult *))                                           \
    X(int, PQsendPrepare, (PGconn *, const char *, const char *, int, const Oid *))                 \
    X(int, PQsendQueryParams,                                                                       \
      (PGconn *, const char *, int, const Oid *, const char *const *, const int *, const int *, int)) \
    X(int, PQsendQueryPrepared,                                                                     \
      (PGconn *, const char *, int, const char *const *, const int *, const int *, int))            \
    X(int, PQserverVersion, (const PGconn *))                                                       \
    X(int, PQsetInstanceData, (PGconn *, PGEventProc, void *))                                      \
    X(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn *, PQnoticeProcessor, void *))              \
    X(int, PQsocket, (const PGconn *))                                                              \
    X(ConnStatusType, PQstatus, (const PGconn *))                                                   \
    X(PGTransactionStatusType, PQtransactionStatus, (const PGconn *))                               \
    X(char *, PQuser, (const PGconn *))

typedef struct {
#define PQDL_FIELD(ret, name, args) ret(*name) args;
    PQDL_FUNCS(PQDL_FIELD)
#undef PQDL_FIELD
} pqdl_table;

extern pqdl_table baton__pq;

/* Loads libpq, once (thread-safe): 0, or BATON_ENOTSUP naming the library
 * and why (dlerror) with every call after a failed first one. */
int baton__pq_load(void);

#ifndef BATON_PQDL_IMPL
#define PQcancel (*baton__pq.PQcancel)
#define PQclear (*baton__pq.PQclear)
#define PQcmdStatus (*baton__pq.PQcmdStatus)
#define PQcmdTuples (*baton__pq.PQcmdTuples)
#define PQconnectPoll (*baton__pq.PQconnectPoll)
#define PQconnectStartParams (*baton__pq.PQconnectStartParams)
#define PQconnectionNeedsPassword (*baton__pq.PQconnectionNeedsPassword)
#define PQconsumeInput (*baton__pq.PQconsumeInput)
#define PQdb (*baton__pq.PQdb)
#define PQerrorMessage (*baton__pq.PQerrorMessage)
#define PQescapeIdentifier (*baton__pq.PQescapeIdentifier)
#define PQfinish (*baton__pq.PQfinish)
#define PQfreeCancel (*baton__pq.PQfreeCancel)
#define PQfreemem (*baton__pq.PQfreemem)
#define PQgetCancel (*baton__pq.PQgetCancel)
#define PQgetResult (*baton__pq.PQgetResult)
#define PQgetisnull (*baton__pq.PQgetisnull)
#define PQgetvalue (*baton__pq.PQgetvalue)
#define PQhost (*baton__pq.PQhost)
#define PQinstanceData (*baton__pq.PQinstanceData)
#define PQisBusy (*baton__pq.PQisBusy)
#define PQnfields (*baton__pq.PQnfields)
#define PQnotifies (*baton__pq.PQnotifies)
#define PQntuples (*baton__pq.PQntuples)
#define PQport (*baton__pq.PQport)
#define PQregisterEventProc (*baton__pq.PQregisterEventProc)
#define PQresultErrorField (*baton__pq.PQresultErrorField)
#define PQresultErrorMessage (*baton__pq.PQresultErrorMessage)
#define PQresultStatus (*baton__pq.PQresultStatus)
#define PQsendPrepare (*baton__pq.PQsendPrepare)
#define PQsendQueryParams (*baton__pq.PQsendQueryParams)
#define PQsendQueryPrepared (*baton__pq.PQsendQueryPrepared)
#define PQserverVersion (*baton__pq.PQserverVersion)
#define PQsetInstanceData (*baton__pq.PQsetInstanceData)
#define PQsetNoticeProcessor (*baton__pq.PQsetNoticeProcessor)
#define PQsocket (*baton__pq.PQsocket)
#define PQstatus (*baton__pq.PQstatus)
#define PQtransactionStatus (*baton__pq.PQtransactionStatus)
#define PQuser (*baton__pq.PQuser)
#endif

#endif

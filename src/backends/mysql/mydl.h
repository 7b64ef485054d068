/*
 * MariaDB Connector/C (libmariadb), loaded on the first mysql:// open
 * (mydl.c) instead of linked: linking it adds OpenSSL and its own start-up
 * (~4 ms) to every program that links baton, whatever engine it then uses.
 *
 * Include this (my_int.h does) instead of <mysql.h>: the mysql_* names the
 * backend uses become calls through the table. Only types and constants
 * come from the headers; the binaries do not link libmariadb.
 */
#ifndef BATON_MY_MYDL_H
#define BATON_MY_MYDL_H

#include <mysql.h>

/* Every Connector/C function the backend calls, and nothing else: a new
 * call needs a line here and one below (the build fails without the
 * second, at link time: libmariadb is not linked). mysql_library_init is
 * mysql.h's macro for mysql_server_init; mydl.c calls it once, after the
 * load. */
#define MYDL_FUNCS(X)                                                                                  \
    X(my_bool, mariadb_get_infov, (MYSQL *, enum mariadb_value, void *, ...))                          \
    X(my_ulonglong, mysql_affected_rows, (MYSQL *))                                                    \
    X(void, mysql_close, (MYSQL *))                                                                    \
    X(void, mysql_data_seek, (MYSQL_RES *, unsigned long long))                                        \
    X(unsigned int, mysql_errno, (MYSQL *))                                                            \
    X(const char *, mysql_error, (MYSQL *))                                                            \
    X(unsigned long *, mysql_fetch_lengths, (MYSQL_RES *))                                             \
    X(MYSQL_ROW, mysql_fetch_row, (MYSQL_RES *))                                                       \
    X(unsigned int, mysql_field_count, (MYSQL *))                                                      \
    X(void, mysql_free_result, (MYSQL_RES *))                                                          \
    X(my_socket, mysql_get_socket, (MYSQL *))                                                          \
    X(const char *, mysql_get_ssl_cipher, (MYSQL *))                                                   \
    X(MYSQL *, mysql_init, (MYSQL *))                                                                  \
    X(my_ulonglong, mysql_insert_id, (MYSQL *))                                                        \
    X(unsigned int, mysql_num_fields, (MYSQL_RES *))                                                   \
    X(my_ulonglong, mysql_num_rows, (MYSQL_RES *))                                                     \
    X(int, mysql_optionsv, (MYSQL *, enum mysql_option, ...))                                          \
    X(int, mysql_real_connect_cont, (MYSQL **, MYSQL *, int))                                          \
    X(int, mysql_real_connect_start,                                                                   \
      (MYSQL **, MYSQL *, const char *, const char *, const char *, const char *, unsigned int,        \
       const char *, unsigned long))                                                                   \
    X(unsigned int, mysql_get_timeout_value_ms, (const MYSQL *))                                       \
    X(int, mysql_real_query, (MYSQL *, const char *, unsigned long))                                   \
    X(int, mysql_server_init, (int, char **, char **))                                                 \
    X(MYSQL_RES *, mysql_store_result, (MYSQL *))                                                      \
    X(unsigned long, mysql_thread_id, (MYSQL *))

typedef struct {
#define MYDL_FIELD(ret, name, args) ret(*name) args;
    MYDL_FUNCS(MYDL_FIELD)
#undef MYDL_FIELD
} mydl_table;

extern mydl_table baton__my;

/* Loads libmariadb and initialises it (mysql_library_init), once
 * (thread-safe): 0, or BATON_ENOTSUP naming the library and why (dlerror)
 * with every call after a failed first one. */
int baton__my_load(void);

#ifndef BATON_MYDL_IMPL
#define mariadb_get_infov (*baton__my.mariadb_get_infov)
#define mysql_affected_rows (*baton__my.mysql_affected_rows)
#define mysql_close (*baton__my.mysql_close)
#define mysql_data_seek (*baton__my.mysql_data_seek)
#define mysql_errno (*baton__my.mysql_errno)
#define mysql_error (*baton__my.mysql_error)
#define mysql_fetch_lengths (*baton__my.mysql_fetch_lengths)
#define mysql_fetch_row (*baton__my.mysql_fetch_row)
#define mysql_field_count (*baton__my.mysql_field_count)
#define mysql_free_result (*baton__my.mysql_free_result)
#define mysql_get_socket (*baton__my.mysql_get_socket)
#define mysql_get_ssl_cipher (*baton__my.mysql_get_ssl_cipher)
#define mysql_init (*baton__my.mysql_init)
#define mysql_insert_id (*baton__my.mysql_insert_id)
#define mysql_num_fields (*baton__my.mysql_num_fields)
#define mysql_num_rows (*baton__my.mysql_num_rows)
#define mysql_optionsv (*baton__my.mysql_optionsv)
#define mysql_real_connect_cont (*baton__my.mysql_real_connect_cont)
#define mysql_real_connect_start (*baton__my.mysql_real_connect_start)
#define mysql_get_timeout_value_ms (*baton__my.mysql_get_timeout_value_ms)
#define mysql_real_query (*baton__my.mysql_real_query)
#define mysql_server_init (*baton__my.mysql_server_init)
#define mysql_store_result (*baton__my.mysql_store_result)
#define mysql_thread_id (*baton__my.mysql_thread_id)
#endif

#endif

/*
 * OpenSSL for the gRPC transport's etcds:// (h2.c), loaded with dlopen on
 * the first etcds:// open that uses it (etls.c), never at program start:
 * libssl and libcrypto cost several milliseconds to map and relocate, which
 * every `baton run` would pay whatever engine it uses. Plain etcd:// never
 * loads them. (The Redis engine has its own table, redis/ossl.c: either
 * engine may be built without the other; dlopen hands both the same
 * library.)
 *
 * Every OpenSSL function h2.c calls is listed once below; after this header
 * a call such as SSL_read(...) goes through the table (OpenSSL's macros like
 * SSL_set_tlsext_host_name or BIO_set_retry_read expand to listed functions
 * too). etls_load() must succeed before the first call.
 */
#ifndef BATON_ETCD_ETLS_H
#define BATON_ETCD_ETLS_H

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define ETLS_FUNCS(X)                                                                            \
    X(BIO_clear_flags) X(BIO_get_data) X(BIO_get_new_index) X(BIO_meth_new) X(BIO_meth_set_create) \
    X(BIO_meth_set_ctrl) X(BIO_meth_set_destroy) X(BIO_meth_set_read) X(BIO_meth_set_write)        \
    X(BIO_new) X(BIO_set_data) X(BIO_set_flags) X(BIO_set_init)                                   \
    X(ERR_clear_error) X(ERR_error_string_n) X(ERR_peek_last_error)                              \
    X(SSL_CTX_check_private_key) X(SSL_CTX_ctrl) X(SSL_CTX_free) X(SSL_CTX_load_verify_locations) \
    X(SSL_CTX_new) X(SSL_CTX_set_alpn_protos) X(SSL_CTX_set_default_verify_paths)                 \
    X(SSL_CTX_set_verify) X(SSL_CTX_use_PrivateKey_file) X(SSL_CTX_use_certificate_chain_file)    \
    X(SSL_connect) X(SSL_ctrl) X(SSL_free) X(SSL_get0_alpn_selected) X(SSL_get0_param)            \
    X(SSL_get_error) X(SSL_get_verify_result) X(SSL_new) X(SSL_pending) X(SSL_read)               \
    X(SSL_set1_host) X(SSL_set_bio) X(SSL_shutdown) X(SSL_write) X(TLS_client_method)             \
    X(X509_VERIFY_PARAM_set1_ip_asc) X(X509_verify_cert_error_string)

#define ETLS_MEMBER(n) __typeof__(&n) n;
typedef struct {
    ETLS_FUNCS(ETLS_MEMBER)
} etls_table;
#undef ETLS_MEMBER

extern etls_table baton__etls;

/* 0 once libssl is loaded (thread-safe, once), or BATON_ENOTSUP with why. */
int etls_load(void);

#ifndef BATON_ETLS_IMPL
#define BIO_clear_flags baton__etls.BIO_clear_flags
#define BIO_get_data baton__etls.BIO_get_data
#define BIO_get_new_index baton__etls.BIO_get_new_index
#define BIO_meth_new baton__etls.BIO_meth_new
#define BIO_meth_set_create baton__etls.BIO_meth_set_create
#define BIO_meth_set_ctrl baton__etls.BIO_meth_set_ctrl
#define BIO_meth_set_destroy baton__etls.BIO_meth_set_destroy
#define BIO_meth_set_read baton__etls.BIO_meth_set_read
#define BIO_meth_set_write baton__etls.BIO_meth_set_write
#define BIO_new baton__etls.BIO_new
#define BIO_set_data baton__etls.BIO_set_data
#define BIO_set_flags baton__etls.BIO_set_flags
#define BIO_set_init baton__etls.BIO_set_init
#define ERR_clear_error baton__etls.ERR_clear_error
#define ERR_error_string_n baton__etls.ERR_error_string_n
#define ERR_peek_last_error baton__etls.ERR_peek_last_error
#define SSL_CTX_check_private_key baton__etls.SSL_CTX_check_private_key
#define SSL_CTX_ctrl baton__etls.SSL_CTX_ctrl
#define SSL_CTX_free baton__etls.SSL_CTX_free
#define SSL_CTX_load_verify_locations baton__etls.SSL_CTX_load_verify_locations
#define SSL_CTX_new baton__etls.SSL_CTX_new
#define SSL_CTX_set_alpn_protos baton__etls.SSL_CTX_set_alpn_protos
#define SSL_CTX_set_default_verify_paths baton__etls.SSL_CTX_set_default_verify_paths
#define SSL_CTX_set_verify baton__etls.SSL_CTX_set_verify
#define SSL_CTX_use_PrivateKey_file baton__etls.SSL_CTX_use_PrivateKey_file
#define SSL_CTX_use_certificate_chain_file baton__etls.SSL_CTX_use_certificate_chain_file
#define SSL_connect baton__etls.SSL_connect
#define SSL_ctrl baton__etls.SSL_ctrl
#define SSL_free baton__etls.SSL_free
#define SSL_get0_alpn_selected baton__etls.SSL_get0_alpn_selected
#define SSL_get0_param baton__etls.SSL_get0_param
#define SSL_get_error baton__etls.SSL_get_error
#define SSL_get_verify_result baton__etls.SSL_get_verify_result
#define SSL_new baton__etls.SSL_new
#define SSL_pending baton__etls.SSL_pending
#define SSL_read baton__etls.SSL_read
#define SSL_set1_host baton__etls.SSL_set1_host
#define SSL_set_bio baton__etls.SSL_set_bio
#define SSL_shutdown baton__etls.SSL_shutdown
#define SSL_write baton__etls.SSL_write
#define TLS_client_method baton__etls.TLS_client_method
#define X509_VERIFY_PARAM_set1_ip_asc baton__etls.X509_VERIFY_PARAM_set1_ip_asc
#define X509_verify_cert_error_string baton__etls.X509_verify_cert_error_string
#endif

#endif

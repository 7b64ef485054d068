/*
 * OpenSSL, one table for every engine that speaks TLS or hashes with it (the
 * Redis and RedLock engines: script digests and rediss://; etcd's gRPC
 * transport: etcds://), loaded with dlopen when the first of them needs it
 * (baton__ossl_load), never at program start: libssl and libcrypto cost
 * several milliseconds to map and relocate, which every `baton run` would
 * pay whatever engine it uses. Built when one of those engines is
 * (BATON_OSSL, from CMakeLists.txt).
 *
 * Every OpenSSL function an engine calls is listed once below; after this
 * header, a call such as SSL_read(...) goes through the table (OpenSSL's own
 * macros like SSL_set_tlsext_host_name or BIO_set_retry_read expand to
 * listed functions too). A new call needs its name in the list and its
 * #define below (without the second the build fails at link time: libssl
 * is not linked). baton__ossl_load() must succeed before the first call.
 */
#ifndef BATON_UTIL_OSSL_H
#define BATON_UTIL_OSSL_H

#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define BATON_OSSL_FUNCS(X)                                                                          \
    X(BIO_clear_flags) X(BIO_get_data) X(BIO_get_new_index) X(BIO_meth_new) X(BIO_meth_set_create)   \
    X(BIO_meth_set_ctrl) X(BIO_meth_set_destroy) X(BIO_meth_set_read) X(BIO_meth_set_write)          \
    X(BIO_new) X(BIO_set_data) X(BIO_set_flags) X(BIO_set_init) X(ERR_clear_error)                   \
    X(ERR_error_string_n) X(ERR_peek_last_error) X(SHA1) X(SSL_CTX_check_private_key)                \
    X(SSL_CTX_ctrl) X(SSL_CTX_free) X(SSL_CTX_load_verify_locations) X(SSL_CTX_new)                  \
    X(SSL_CTX_set_alpn_protos) X(SSL_CTX_set_default_verify_paths) X(SSL_CTX_set_verify)             \
    X(SSL_CTX_use_PrivateKey_file) X(SSL_CTX_use_certificate_chain_file) X(SSL_connect) X(SSL_ctrl)  \
    X(SSL_free) X(SSL_get0_alpn_selected) X(SSL_get0_param) X(SSL_get_error)                         \
    X(SSL_get_verify_result) X(SSL_new) X(SSL_pending) X(SSL_read) X(SSL_set1_host) X(SSL_set_bio)   \
    X(SSL_set_fd) X(SSL_shutdown) X(SSL_write) X(TLS_client_method) X(X509_VERIFY_PARAM_set1_ip_asc) \
    X(X509_verify_cert_error_string)

#define BATON_OSSL_MEMBER(n) __typeof__(&n) n;
typedef struct {
    BATON_OSSL_FUNCS(BATON_OSSL_MEMBER)
} baton_ossl;
#undef BATON_OSSL_MEMBER

extern baton_ossl baton__ossl;

/* 0 once libssl (and with it libcrypto) is loaded (thread-safe, loads once
 * per process, whichever engine asks first), or BATON_ENOTSUP with the
 * reason set. */
int baton__ossl_load(void);

#ifndef BATON_OSSL_IMPL
#define BIO_clear_flags baton__ossl.BIO_clear_flags
#define BIO_get_data baton__ossl.BIO_get_data
#define BIO_get_new_index baton__ossl.BIO_get_new_index
#define BIO_meth_new baton__ossl.BIO_meth_new
#define BIO_meth_set_create baton__ossl.BIO_meth_set_create
#define BIO_meth_set_ctrl baton__ossl.BIO_meth_set_ctrl
#define BIO_meth_set_destroy baton__ossl.BIO_meth_set_destroy
#define BIO_meth_set_read baton__ossl.BIO_meth_set_read
#define BIO_meth_set_write baton__ossl.BIO_meth_set_write
#define BIO_new baton__ossl.BIO_new
#define BIO_set_data baton__ossl.BIO_set_data
#define BIO_set_flags baton__ossl.BIO_set_flags
#define BIO_set_init baton__ossl.BIO_set_init
#define ERR_clear_error baton__ossl.ERR_clear_error
#define ERR_error_string_n baton__ossl.ERR_error_string_n
#define ERR_peek_last_error baton__ossl.ERR_peek_last_error
#define SHA1 baton__ossl.SHA1
#define SSL_CTX_check_private_key baton__ossl.SSL_CTX_check_private_key
#define SSL_CTX_ctrl baton__ossl.SSL_CTX_ctrl
#define SSL_CTX_free baton__ossl.SSL_CTX_free
#define SSL_CTX_load_verify_locations baton__ossl.SSL_CTX_load_verify_locations
#define SSL_CTX_new baton__ossl.SSL_CTX_new
#define SSL_CTX_set_alpn_protos baton__ossl.SSL_CTX_set_alpn_protos
#define SSL_CTX_set_default_verify_paths baton__ossl.SSL_CTX_set_default_verify_paths
#define SSL_CTX_set_verify baton__ossl.SSL_CTX_set_verify
#define SSL_CTX_use_PrivateKey_file baton__ossl.SSL_CTX_use_PrivateKey_file
#define SSL_CTX_use_certificate_chain_file baton__ossl.SSL_CTX_use_certificate_chain_file
#define SSL_connect baton__ossl.SSL_connect
#define SSL_ctrl baton__ossl.SSL_ctrl
#define SSL_free baton__ossl.SSL_free
#define SSL_get0_alpn_selected baton__ossl.SSL_get0_alpn_selected
#define SSL_get0_param baton__ossl.SSL_get0_param
#define SSL_get_error baton__ossl.SSL_get_error
#define SSL_get_verify_result baton__ossl.SSL_get_verify_result
#define SSL_new baton__ossl.SSL_new
#define SSL_pending baton__ossl.SSL_pending
#define SSL_read baton__ossl.SSL_read
#define SSL_set1_host baton__ossl.SSL_set1_host
#define SSL_set_bio baton__ossl.SSL_set_bio
#define SSL_set_fd baton__ossl.SSL_set_fd
#define SSL_shutdown baton__ossl.SSL_shutdown
#define SSL_write baton__ossl.SSL_write
#define TLS_client_method baton__ossl.TLS_client_method
#define X509_VERIFY_PARAM_set1_ip_asc baton__ossl.X509_VERIFY_PARAM_set1_ip_asc
#define X509_verify_cert_error_string baton__ossl.X509_verify_cert_error_string
#endif

#endif

/* The engines baton knows: one line each. Adding an engine is a folder
 * src/backends/NAME/ with spec.c (its description: const baton_engine_info
 * baton__info_NAME, always compiled) and its code (the table const
 * baton_backend baton__backend_NAME, compiled when the build defines
 * BATON_WITH_NAME), plus a line here and its library check in
 * CMakeLists.txt. The order is the order of `baton engines` and the docs. */
#ifndef BATON_CORE_ENGINES_H
#define BATON_CORE_ENGINES_H

#define BATON_ENGINES(X) \
    X(file)              \
    X(sqlite)            \
    X(postgres)          \
    X(mysql)             \
    X(redis)             \
    X(redlock)           \
    X(zk)                \
    X(etcd)

#endif

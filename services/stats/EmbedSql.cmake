# Writes OUT, a C++ file defining relay::stats::Embedded<NAME>() from every
# *.sql under DIR, so relay-stats carries its schema and queries with it
# (no source tree needed where it runs). Run by CMake at build time:
#   cmake -DDIR=... -DOUT=... -DNAME=... -P EmbedSql.cmake
file(GLOB files RELATIVE ${DIR} ${DIR}/*.sql)
list(SORT files)
set(body "// Generated from ${DIR} by EmbedSql.cmake: do not edit.\n#include \"relay/stats/sql_files.h\"\n\nnamespace relay::stats {\nnamespace {\nconst SqlFile kFiles[] = {\n")
foreach(f ${files})
  file(READ ${DIR}/${f} text)
  string(APPEND body "    {\"${f}\", R\"relaysql(${text})relaysql\"},\n")
endforeach()
string(APPEND body "};\n}  // namespace\n\nstd::span<const SqlFile> Embedded${NAME}() { return kFiles; }\n\n}  // namespace relay::stats\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)

# Writes OUT, a C++ file defining relay::stats::Embedded<NAME>() from every
# *.sql under DIR, so relay-stats carries its schema and queries with it
# (no source tree needed where it runs). Run by CMake at build time:
#   cmake -DDIR=... -DOUT=... -DNAME=... -P EmbedSql.cmake
file(GLOB files RELATIVE ${DIR} ${DIR}/*.sql)
list(SORT files)
set(body "// Generated from ${DIR} by EmbedSql.cmake: do not edit.\n#include \"relay/stats/sql_files.h\"\n\nnamespace relay::stats {\nnamespace {\nconst SqlFile kFiles[] = {\n")
# FRAGMENTS (optional): a directory of <name>.sql expressions; {{name}} in a
# file is replaced by that expression (its comment lines dropped), so a rule
# several queries share is written once (deploy/clickhouse/fragments).
set(fragment_names)
if(FRAGMENTS)
  file(GLOB fragment_files RELATIVE ${FRAGMENTS} ${FRAGMENTS}/*.sql)
  foreach(frag ${fragment_files})
    string(REGEX REPLACE "\\.sql$" "" fname ${frag})
    file(READ ${FRAGMENTS}/${frag} ftext)
    string(REGEX REPLACE "(^|\n)--[^\n]*" "" ftext "${ftext}")
    string(STRIP "${ftext}" ftext)
    set(fragment_${fname} "${ftext}")
    list(APPEND fragment_names ${fname})
  endforeach()
endif()
foreach(f ${files})
  file(READ ${DIR}/${f} text)
  foreach(fname ${fragment_names})
    string(REPLACE "{{${fname}}}" "${fragment_${fname}}" text "${text}")
  endforeach()
  string(FIND "${text}" "{{" unexpanded)
  if(NOT unexpanded EQUAL -1)
    message(FATAL_ERROR "${DIR}/${f}: a {{fragment}} with no file in ${FRAGMENTS}")
  endif()
  string(APPEND body "    {\"${f}\", R\"relaysql(${text})relaysql\"},\n")
endforeach()
string(APPEND body "};\n}  // namespace\n\nstd::span<const SqlFile> Embedded${NAME}() { return kFiles; }\n\n}  // namespace relay::stats\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)

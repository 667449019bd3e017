# Prints the name of every function a C header declares at file scope, one
# per line: prototypes only (static inline definitions, typedefs of
# function pointers and struct members are not declarations of a function
# the library exports). Comments, preprocessor lines and the
# `extern "C" {` of __cplusplus blocks are skipped.
BEGIN { depth = 0; incpp = 0; stmt = ""; incomment = 0 }
{
  line = strip_comments($0)
  if (line ~ /^[ \t]*#[ \t]*ifdef[ \t]+__cplusplus/) { incpp = 1; next }
  if (incpp) { if (line ~ /^[ \t]*#[ \t]*endif/) incpp = 0; next }
  if (line ~ /^[ \t]*#/) {
    while (line ~ /\\$/ && (getline nxt) > 0) line = nxt
    next
  }
  for (k = 1; k <= length(line); k++) {
    c = substr(line, k, 1)
    if (c == "{") {
      if (depth == 0) stmt = ""
      depth++
    } else if (c == "}") {
      depth--
    } else if (depth == 0) {
      if (c == ";") { emit(stmt); stmt = "" } else stmt = stmt c
    }
  }
  if (depth == 0) stmt = stmt " "
}
function strip_comments(line,   out, i, j) {
  out = ""
  while (length(line) > 0) {
    if (incomment) {
      i = index(line, "*/")
      if (i == 0) return out
      line = substr(line, i + 2)
      incomment = 0
    } else {
      i = index(line, "/*")
      j = index(line, "//")
      if (j > 0 && (i == 0 || j < i)) return out substr(line, 1, j - 1)
      if (i == 0) return out line
      out = out substr(line, 1, i - 1)
      line = substr(line, i + 2)
      incomment = 1
    }
  }
  return out
}
function emit(s,   name) {
  gsub(/[ \t\n]+/, " ", s)
  sub(/^ /, "", s)
  if (s ~ /^(typedef|static)/ || s !~ /\(/) return
  if (match(s, /[A-Za-z_][A-Za-z0-9_]*[ ]*\(/)) {
    name = substr(s, RSTART, RLENGTH)
    sub(/[ ]*\($/, "", name)
    print name
  }
}

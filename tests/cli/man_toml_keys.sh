#!/usr/bin/env bash
# tests/cli/man_toml_keys.sh [CONFIG_CC [PAGE]] - ulp-targetd.toml(5) documents exactly the
# keys ulp-targetd's configuration reader accepts.
#
# The keys come from the source, not from a list kept here: every call of Reader::known()
# in tools/ulp-targetd/config.cc names, in a brace list of string literals, the keys one
# table accepts (the top level, [iscsi], [iser], [srp], [[target]], its chap tables,
# [[target.lun]]); any other key is an error at load. C++ is read by a small tokenizer
# (comments dropped, string literals whole, brackets counted), so a list spread over lines,
# reformatted or commented still reads; a known() call whose keys it cannot read (no brace
# list of literals) fails the test rather than being skipped.
#
# The page's entries of keys are its tagged paragraphs (.TP, or .TQ) whose tag reads
# "KEY = TYPE" once the font escapes are taken out (roff: \fBKEY\fR = \fITYPE\fR). A
# section (.SH) or subsection (.SS) of the page documents one table. It fails when
#   - a key of a known() list has no entry in the page;
#   - an entry names a key that no known() list has (renamed, removed, or invented);
#   - a known() list's keys are not all in one section: the section documenting most of
#     them lacks one that is documented elsewhere (srp's immediate_data documented only
#     under [iscsi], say);
#   - a section mixes keys of different lists (a chap key among [[target]]'s);
#   - a section documents the same key twice, or a tag names a key but is not written
#     KEY = TYPE (so that it would not be counted).
# It prints the lists it found and the page's entries, section by section.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${1:-$here/../../tools/ulp-targetd/config.cc}
page=${2:-$here/../../docs/man/ulp-targetd.toml.5}
for f in "$src" "$page"; do
	[[ -r $f ]] || {
		echo "usage: man_toml_keys.sh [CONFIG_CC [PAGE]]: cannot read $f" >&2
		exit 2
	}
done

# The known() lists: "LIST <line> <second argument>\t<key> <key> ...", or "BAD <line> <why>"
# for a call whose keys cannot be read. A declaration or definition of known (the name
# after a type, not after . -> :: or an operator) is not a call and is passed over.
lists=$(awk '
function tok(type, val) { n++; T[n] = type; V[n] = val; L[n] = line }
{ src = src $0 "\n" }
END {
	line = 1; len = length(src); i = 1
	while (i <= len) {
		c = substr(src, i, 1); d = substr(src, i + 1, 1)
		if (c == "\n") { line++; i++; continue }
		if (c ~ /[ \t\r\f\v]/) { i++; continue }
		if (c == "/" && d == "/") { while (i <= len && substr(src, i, 1) != "\n") i++; continue }
		if (c == "/" && d == "*") {
			i += 2
			while (i <= len && substr(src, i, 2) != "*/") {
				if (substr(src, i, 1) == "\n") line++
				i++
			}
			i += 2; continue
		}
		if (c == "\"" || c == "\047") {
			q = c; s = ""; i++
			while (i <= len && (e = substr(src, i, 1)) != q) {
				if (e == "\\") { s = s e substr(src, i + 1, 1); i += 2; continue }
				if (e == "\n") line++
				s = s e; i++
			}
			i++
			if (q == "\"") tok("STR", s); else tok("CHR", s)
			continue
		}
		if (c ~ /[A-Za-z_]/) {
			s = ""
			while (i <= len && (e = substr(src, i, 1)) ~ /[A-Za-z0-9_]/) { s = s e; i++ }
			tok("ID", s); continue
		}
		tok("P", c); i++
	}
	for (k = 1; k <= n; k++) {
		if (!(T[k] == "ID" && V[k] == "known" && k < n && V[k + 1] == "(" && T[k + 1] == "P"))
			continue
		if (k > 1 && T[k - 1] == "ID" && V[k - 1] != "return")
			continue # bool known(...): the definition
		paren = 0; brace = 0; arg = 0; ctx = ""; keys = ""; bad = ""; nkeys = 0
		for (j = k + 1; j <= n; j++) {
			if (T[j] == "P" && V[j] == "(") paren++
			if (T[j] == "P" && V[j] == ")") { paren--; if (paren == 0) break }
			if (T[j] == "P" && V[j] == "{") { brace++; continue }
			if (T[j] == "P" && V[j] == "}") { brace--; continue }
			if (brace == 0 && paren == 1 && T[j] == "P" && V[j] == ",") { arg++; continue }
			if (brace == 0 && arg == 1)
				ctx = ctx (T[j] == "STR" ? "\"" V[j] "\"" : V[j])
			if (brace > 0 && T[j] == "STR") {
				if (V[j] !~ /^[a-z_][a-z0-9_]*$/)
					bad = bad " \"" V[j] "\""
				keys = keys " " V[j]; nkeys++
			} else if (brace > 0 && !(T[j] == "P" && V[j] == ",")) {
				bad = bad " " V[j]
			}
		}
		if (j > n)
			print "BAD " L[k] " known( has no closing parenthesis"
		else if (nkeys == 0)
			print "BAD " L[k] " known( with no brace list of keys (a key list this test cannot read)"
		else if (bad != "")
			print "BAD " L[k] " known( list holds what is not a key name:" bad
		else
			print "LIST " L[k] " " ctx "\t" substr(keys, 2)
	}
}' "$src")

failures=0
fail()
{
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}

name=$(basename "$src")
echo "known() lists in $name:"
nlists=0 nkeys=0
while IFS= read -r l; do
	case $l in
	BAD*) fail "$name:${l#BAD }" ;;
	LIST*)
		nlists=$((nlists + 1))
		read -r _ at ctx <<<"${l%%$'\t'*}"
		keys=${l#*$'\t'}
		nkeys=$((nkeys + $(wc -w <<<"$keys")))
		echo "  $name:$at known(.., ${ctx:-?}, ..): $keys"
		;;
	esac
done <<<"$lists"
((nlists)) || fail "no known( list found in $src"

# The page's key entries: "<section>\t<key>" in page order, or "NOFORM <section>\t<tag>"
# for a tag whose first word is a key name but which is not written KEY = TYPE.
entries=$(awk '
function plain(s) {
	gsub(/\\f(\(..|\[[^]]*\]|.)/, "", s); gsub(/\\-/, "-", s); gsub(/\\&/, "", s)
	sub(/^\.[A-Z][A-Z]?[ \t]+/, "", s); gsub(/"/, "", s); sub(/^[ \t]+/, "", s)
	return s
}
/^\.\\"/ { next }
/^\.(SH|SS)([ \t]|$)/ { s = $0; sub(/^\.(SH|SS)[ \t]*/, "", s); unit = plain(s); tag = 0; next }
/^\.(TP|TQ)([ \t]|$)/ { tag = 1; next }
tag {
	tag = 0; s = plain($0)
	if (s ~ /^[a-z_][a-z0-9_]* = /) { sub(/ = .*/, "", s); print unit "\t" s }
	else if (s ~ /^[a-z_][a-z0-9_]*$/ || s ~ /^[a-z_][a-z0-9_]*[ \t]*=/) print "NOFORM " unit "\t" s
}' "$page")

pname=$(basename "$page")
echo "key entries in $pname:"
awk -F'\t' '!/^NOFORM /{ if ($1 != u) { if (u != "") print ""; u = $1; printf "  %s:", u }
	printf " %s", $2 } END { if (u != "") print "" }' <<<"$entries"

# The comparison, on "L <line>\t<key>" (lists) and "U <section>\t<key>" (page) lines.
report=$(
	{
		while IFS= read -r l; do
			[[ $l == LIST* ]] || continue
			read -r _ at _ <<<"${l%%$'\t'*}"
			for k in ${l#*$'\t'}; do printf 'L %s\t%s\n' "$at" "$k"; done
		done <<<"$lists"
		while IFS= read -r e; do
			[[ -n $e ]] || continue
			if [[ $e == NOFORM* ]]; then
				printf 'N %s\n' "${e#NOFORM }"
			else
				printf 'U %s\n' "$e"
			fi
		done <<<"$entries"
	} | awk -F'\t' -v src="$name" -v page="$pname" '
	{ kind = substr($1, 1, 1); grp = substr($1, 3); k = $2 }
	kind == "L" {
		if (!(grp in lsize)) { nl++; lorder[nl] = grp }
		lsize[grp]++; inl[grp, k] = 1; lkeys[grp] = lkeys[grp] " " k
		if (!(k in anyl)) anyl[k] = grp
	}
	kind == "U" {
		if (!(grp in usize)) { nu++; uorder[nu] = grp }
		if ((grp, k) in inu) print "section " grp " of " page " documents " k " twice"
		usize[grp]++; inu[grp, k] = 1; ukeys[grp] = ukeys[grp] " " k
		if (!(k in anyu)) anyu[k] = grp
	}
	kind == "N" { print "the entry \"" k "\" under " grp " of " page " is not written KEY = TYPE (\\fBKEY\\fR = \\fITYPE\\fR)" }
	END {
		for (a = 1; a <= nl; a++) {
			l = lorder[a]; m = split(substr(lkeys[l], 2), ks, " ")
			for (b = 1; b <= m; b++)
				if (!(ks[b] in anyu))
					print "key " ks[b] " (" src ":" l "'"'"'s known() list) has no entry in " page
		}
		for (a = 1; a <= nu; a++) {
			u = uorder[a]; m = split(substr(ukeys[u], 2), ks, " ")
			for (b = 1; b <= m; b++)
				if (!(ks[b] in anyl))
					print page " documents " ks[b] " under " u ", a key no known() list in " src " has"
		}
		# Each list within one section: the one that documents most of it.
		for (a = 1; a <= nl; a++) {
			l = lorder[a]; m = split(substr(lkeys[l], 2), ks, " ")
			best = ""; bestn = -1
			for (c = 1; c <= nu; c++) {
				u = uorder[c]; cnt = 0
				for (b = 1; b <= m; b++) if ((u, ks[b]) in inu) cnt++
				if (cnt > bestn) { best = u; bestn = cnt }
			}
			for (b = 1; b <= m; b++)
				if (ks[b] in anyu && !((best, ks[b]) in inu))
					print "key " ks[b] " of " src ":" l "'"'"'s list is documented under " anyu[ks[b]] ", not under " best " with the rest of its list"
		}
		# Each section within one list: the one most of its keys belong to.
		for (c = 1; c <= nu; c++) {
			u = uorder[c]; m = split(substr(ukeys[u], 2), ks, " ")
			best = ""; bestn = -1
			for (a = 1; a <= nl; a++) {
				l = lorder[a]; cnt = 0
				for (b = 1; b <= m; b++) if ((l, ks[b]) in inl) cnt++
				if (cnt > bestn) { best = l; bestn = cnt }
			}
			for (b = 1; b <= m; b++)
				if (ks[b] in anyl && !((best, ks[b]) in inl))
					print "section " u " documents " ks[b] ", which is not a key of its table (" src ":" best "'"'"'s list) but of " src ":" anyl[ks[b]] "'"'"'s"
		}
	}'
)
while IFS= read -r r; do
	[[ -n $r ]] && fail "$r"
done <<<"$report"

if ((failures)); then
	echo "$failures failures: $pname does not document exactly the keys $name accepts" >&2
	exit 1
fi
echo "PASS: $pname documents the $nkeys keys of the $nlists known() lists in $name, each list in one section"

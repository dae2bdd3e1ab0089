# Output files of the recipes that are whole or absent: sourced by common.sh and demo.sh.

# to_file FILE CMD...: CMD's standard output into FILE, which takes its name only when CMD
# succeeds; a failed CMD leaves the old FILE, or none, and its own exit code.
to_file() {
    local file=$1 code=0
    shift
    "$@" >"$file.partial" || code=$?
    if [ "$code" = 0 ]; then
        mv -f "$file.partial" "$file"
    else
        rm -f "$file.partial"
    fi
    return "$code"
}

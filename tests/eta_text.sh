# Sourced by the CLI and SLURM tests that read trident's durations ("ETA 1h05m", "start-up 0m09s").
# seconds_of 1h05m|0m09s: in seconds (base 10: bash reads 09 as a bad octal number).
seconds_of() { sed -E 's/^([0-9]+)h([0-9]+)m$/\1 \2 0/; s/^([0-9]+)m([0-9]+)s$/0 \1 \2/' <<<"$1" | { read -r h m s; echo $((10#$h * 3600 + 10#$m * 60 + 10#$s)); }; }

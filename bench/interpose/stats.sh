# stats.sh: the summary statistics the bench/interpose scripts print, sourced by them. Each reads one number per
# line on standard input.
# shellcheck shell=bash

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mean() { awk '{ s += $1 } END { printf "%.3f", s / NR }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f..%.3f", lo, hi }'; }
# perftest's result line follows the header line that starts with " #bytes"; the field of ib_write_bw's
# "BW average[MB/sec]".
bw_of() { awk '/^ *#bytes/ { getline; print $4; exit }' "$1"; }

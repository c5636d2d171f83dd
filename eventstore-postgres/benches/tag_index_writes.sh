#!/usr/bin/env bash
# What the tag index costs appends: pgbench inserting events into four copies of the schema,
# side by side, rounds alternating between them, one client and eight.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
#     bash eventstore-postgres/benches/tag_index_writes.sh [rounds] [seconds]
#
# The copies, each on a fresh prefix holding 40,000 events first:
#   tag index     this version's schema (the tag table, its two indexes, the trigger)
#   one index     the same without the tag table's (tag, tx, position) index
#   GIN           schema version 1 as 0.2.0 shipped it: a GIN index on tags, no tag table
#   no tag index  this version's schema without the trigger: no tag is indexed at all
# Each event carries three tags (one every event shares, an entity, one of three kinds), the
# server makes its values, ids time-ordered as the storage's are. Prints transactions per
# second, medians of the rounds. Drops the copies at the end.
set -euo pipefail

url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
rounds=${1:-3}
seconds=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
run=$(date +%s)
trap 'rm -rf "$work"' EXIT

psql_quiet() { psql -q -X -v ON_ERROR_STOP=1 "$url" "$@" > /dev/null 2>&1; }

declare -A schema=(
  [tag_index]="$here/sql/schema.sql"
  [one_index]="$here/sql/schema.sql"
  [gin]="$here/tests/postgres/shipped_schemas/0.2.0.sql"
  [no_tag_index]="$here/sql/schema.sql"
)
variants=(tag_index one_index gin no_tag_index)

insert() { # prefix events-per-statement
  cat <<SQL
INSERT INTO $1events (id, stream_context, stream_purpose, event_type, payload, tags)
SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
        || substr(md5(random()::text), 1, 20))::uuid,
       'bench', 'default', 'Measured', json_build_object('n', g, 'label', 'measurement ' || g),
       ARRAY['run:r1', 'order:o-' || (random() * 10000)::int, 'kind:k' || (g % 3)]
FROM generate_series(1, $2) AS g;
SQL
}

for variant in "${variants[@]}"; do
  prefix="tagw${run}_${variant}_"
  sed "s/__prefix__/$prefix/g" "${schema[$variant]}" | psql_quiet --single-transaction
  case $variant in
    one_index) psql_quiet -c "DROP INDEX ${prefix}event_tags_order_idx" ;;
    no_tag_index) psql_quiet -c "DROP TRIGGER ${prefix}events_tags_trigger ON ${prefix}events" ;;
  esac
  insert "$prefix" 100 > "$work/$variant-100.sql"
  insert "$prefix" 1 > "$work/$variant-1.sql"
  for _ in $(seq 400); do cat "$work/$variant-100.sql"; done | psql_quiet
  psql_quiet -c "VACUUM ANALYZE ${prefix}events"
done

tps() { pgbench -n -T "$seconds" "$@" "$url" 2> /dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for round in $(seq "$rounds"); do
  for variant in "${variants[@]}"; do
    echo "$variant batch $(tps -f "$work/$variant-100.sql")" >> "$work/results"
    echo "$variant single $(tps -f "$work/$variant-1.sql")" >> "$work/results"
    echo "$variant clients $(tps -c 8 -j 2 -f "$work/$variant-1.sql")" >> "$work/results"
  done
done

echo "| schema | batches of 100, events/s | single appends, 1 client | 8 clients |"
echo "|---|---:|---:|---:|"
for variant in "${variants[@]}"; do
  figure() { awk -v v="$variant" -v k="$1" '$1 == v && $2 == k { print $3 }' "$work/results" | median; }
  batch=$(figure batch)
  printf '| %s | %.0f | %.0f | %.0f |\n' "${variant//_/ }" "$(awk -v t="$batch" 'BEGIN { print t * 100 }')" \
    "$(figure single)" "$(figure clients)"
done

for variant in "${variants[@]}"; do
  prefix="tagw${run}_${variant}_"
  sed "s/__prefix__/$prefix/g" "$here/sql/drop.sql" | psql_quiet --single-transaction
  psql_quiet -c "DROP TABLE IF EXISTS ${prefix}event_tags"
done

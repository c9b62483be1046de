#!/usr/bin/env bash
# Runs one stage of `make test` and times it; make runs the stages side by
# side (the Makefile's test-stages), so each writes its output to a log and
# prints it whole when it ends, one stage's log after another's, never mixed.
#
#   hack/stage.sh run NAME COMMAND [ARG...]   run COMMAND as stage NAME
#   hack/stage.sh summary                     every stage: start, time, result
#
# STAGE_DIR (default bin/stages) holds NAME.log and NAME.time ("start end rc",
# Unix seconds) and the time make test started (start).
set -uo pipefail

dir=${STAGE_DIR:-bin/stages}
mkdir -p "$dir"

case ${1:-} in
run)
	name=$2
	shift 2
	log="$dir/$name.log"
	start=$(date +%s)
	echo "stage $name: started at $(date -u +%H:%M:%S) (log: $log)"
	"$@" >"$log" 2>&1
	rc=$?
	end=$(date +%s)
	echo "$start $end $rc" >"$dir/$name.time"
	status=ok
	[[ $rc == 0 ]] || status="FAILED (exit $rc)"
	{
		flock 9
		echo "===== stage $name: $status in $((end - start)) s; its output:"
		cat "$log"
		echo "===== end of stage $name: $status in $((end - start)) s"
	} 9>"$dir/.print.lock"
	exit "$rc"
	;;
summary)
	t0=$(cat "$dir/start" 2>/dev/null || echo 0)
	last=$t0
	for f in "$dir"/*.time; do
		[[ -e $f ]] || continue
		read -r _ e _ <"$f"
		((e > last)) && last=$e
	done
	echo "make test: stages (start and time in seconds from the start; the last ended at $((last - t0)) s)"
	printf '  %-22s %7s %7s  %s\n' stage start time result
	for f in "$dir"/*.time; do
		[[ -e $f ]] || continue
		read -r s e rc <"$f"
		r=ok
		[[ $rc == 0 ]] || r="FAILED (exit $rc)"
		printf '  %-22s %7d %7d  %s\n' "$(basename "$f" .time)" $((s - t0)) $((e - s)) "$r"
	done | sort -k2,2n
	for f in "$dir"/*.log; do
		[[ -e $f ]] || continue
		n=$(basename "$f" .log)
		[[ -e "$dir/$n.time" ]] || printf '  %-22s %7s %7s  %s\n' "$n" - - "did not end"
	done
	;;
*)
	echo "usage: $0 run NAME COMMAND... | summary" >&2
	exit 2
	;;
esac

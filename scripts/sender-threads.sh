#!/bin/sh
# scripts/sender-threads.sh N (issue 16, early comparison; paths are the author's, to generalise): clip_ts at N clients for 70 s, server with 1 then 2 sender threads; then iperf3.
cd /tmp/nb
N=${1:-480}
for k in 1 2; do
  ./iso-new2 serve --data /tmp/nb/store --rtsp 127.0.0.1:8554 --http 127.0.0.1:8080 --sender-threads $k > serve-k$k.log 2>&1 &
  pid=$!
  sleep 4
  echo "k=$k start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  ./iso-new2 bench rtsp://127.0.0.1:8554/clip_ts --out k$k-n$N --clients $N --duration 70 --seed 1 \
    --server-pid $pid --metrics http://127.0.0.1:8080/metrics 2>&1 | tail -1
  kill $pid; wait $pid 2>/dev/null; sleep 10
done
iperf3 -s -D -p 5299 >/dev/null 2>&1; sleep 1
iperf3 -c 127.0.0.1 -p 5299 -u -l 1328 -b 0 -P 2 -t 15 -J > iperf-p2.json
pkill -f "iperf3 -s"
python3 -c "
import json
j=json.load(open('iperf-p2.json'))
e=j['end']['sum']
print('iperf3 -u -l 1328 -b 0 -P 2: %.0f Mb/s, lost %.2f %%' % (e['bits_per_second']/1e6, e.get('lost_percent',0)))
"

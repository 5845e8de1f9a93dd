target/release/isochron bench --out OUT/one --cluster-nodes 1 --shape 100mbit --block-kib 16 --ingest OUT/cg300.ts --clients 1 --no-mtfc --buffer-ms 2000 --duration 30 --seed 7

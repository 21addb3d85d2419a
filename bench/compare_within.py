"""Two warehouses compared table by table, DOUBLE columns within a relative tolerance.

    python bench/compare_within.py OLD.duckdb NEW.duckdb [TOLERANCE]   (default 1e-9)

Columns other than DOUBLE must hold the same rows (EXCEPT ALL both ways); then rows are paired by
those columns (and their DOUBLEs' order within a pair) and every DOUBLE compared: |a - b| /
max(|a|, |b|) <= TOLERANCE, NULL only with NULL. Columns that say when a load ran are left out.
Why: 249fe72 loading the same fleet traces twice does not give the same DOUBLEs (DuckDB adds a
parallel sum in no fixed order: run_gpu_energy differed in 1,957 of 2,500 rows, at most 3.3e-15
relative), and compare_trace_tables.py's rounding to 12 digits calls some of those rows different
(a value such as 100.00000000000001 rounds to either side). Exits 1 when a table differs.
"""
import sys, duckdb
TIME = {"loaded_at", "computed_at", "unloaded_at", "applied_at", "created_at", "updated_at", "stamped_at", "merged_at"}
SKIP = {("schema_stamp", "sha256")}
a, b = sys.argv[1], sys.argv[2]
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-9
con = duckdb.connect()
con.execute(f"ATTACH '{a}' AS a (READ_ONLY)"); con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
tabs = lambda db: [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name=? AND NOT temporary ORDER BY 1", [db]).fetchall()]
ta, tb = tabs("a"), tabs("b")
bad = 0
if ta != tb:
    print("tables differ", set(ta) ^ set(tb)); bad += 1
for t in ta:
    if t not in tb: continue
    cols = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name='a' AND table_name=? ORDER BY column_index", [t]).fetchall()
    cols = [(n, k) for n, k in cols if n not in TIME and (t, n) not in SKIP]
    keys = [f'"{n}"' for n, k in cols if k != "DOUBLE"]
    dbl = [f'"{n}"' for n, k in cols if k == "DOUBLE"]
    na = con.execute(f"SELECT count(*) FROM a.{t}").fetchone()[0]; nb = con.execute(f"SELECT count(*) FROM b.{t}").fetchone()[0]
    kl = ", ".join(keys) or "1"
    oa = con.execute(f"SELECT count(*) FROM (SELECT {kl} FROM a.{t} EXCEPT ALL SELECT {kl} FROM b.{t})").fetchone()[0]
    ob = con.execute(f"SELECT count(*) FROM (SELECT {kl} FROM b.{t} EXCEPT ALL SELECT {kl} FROM a.{t})").fetchone()[0]
    worst = 0.0
    if dbl and not (oa or ob):
        order = ", ".join(dbl)
        rn = f"row_number() OVER (PARTITION BY {kl} ORDER BY {order}) AS rn_"
        on = " AND ".join([f"x.{k} IS NOT DISTINCT FROM y.{k}" for k in keys] + ["x.rn_ = y.rn_"])
        diffs = ", ".join(f"max(CASE WHEN x.{d} IS NULL AND y.{d} IS NULL THEN 0 WHEN x.{d} IS NULL OR y.{d} IS NULL THEN 1e9 "
                          f"WHEN x.{d} = y.{d} THEN 0 ELSE abs(x.{d} - y.{d}) / greatest(abs(x.{d}), abs(y.{d})) END)" for d in dbl)
        row = con.execute(f"SELECT {diffs} FROM (SELECT *, {rn} FROM a.{t}) x JOIN (SELECT *, {rn} FROM b.{t}) y ON {on}").fetchone()
        worst = max(v or 0 for v in row)
    ok = na == nb and not oa and not ob and worst <= tol
    bad += not ok
    print(f"{'ok  ' if ok else 'DIFF'} {t}: {na:,}/{nb:,} rows, non-double only-a {oa} only-b {ob}, worst rel {worst:.2e}")
print("RESULT:", "equal" if not bad else f"{bad} tables differ")
sys.exit(1 if bad else 0)

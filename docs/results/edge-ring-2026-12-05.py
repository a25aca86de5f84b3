import json,statistics as st,sys
runs=json.load(open(sys.argv[1]))
by={}
for r in runs:
    l=r['loads'][0]
    by.setdefault(r['variant'],{})[r['round']]=dict(rate=l['per_second'],m=r['machine_cpu_s']/r['operations']*1000,p=r['proxy_cpu_s']/r['operations']*1000,p99=l['latency']['p99_ms'],err=sum(l['errors'].values()) if l['errors'] else 0)
base=sys.argv[2]
for v,rs in by.items():
    rounds=sorted(rs)
    med=lambda k: st.median(rs[i][k] for i in rounds)
    rr=[rs[i]['rate']/by[base][i]['rate'] for i in rounds]
    mm=[rs[i]['m']/by[base][i]['m'] for i in rounds]
    pp=[rs[i]['p']/by[base][i]['p'] for i in rounds]
    print(f"{v:20s} rate {med('rate'):8.0f} ({min(rs[i]['rate'] for i in rounds):.0f}-{max(rs[i]['rate'] for i in rounds):.0f}) machine ms/req {med('m'):.4f} proxy ms/req {med('p'):.4f} p99 {med('p99'):.2f} errs {sum(rs[i]['err'] for i in rounds)} | per-round x{base}: rate {st.median(rr):.2f} ({min(rr):.2f}-{max(rr):.2f}) machine {st.median(mm):.2f} ({min(mm):.2f}-{max(mm):.2f}) proxy {st.median(pp):.2f} ({min(pp):.2f}-{max(pp):.2f})")

import json,sys,collections
runs=json.load(open(sys.argv[1]+'/runs.json'))
d=collections.defaultdict(list)
for r in runs:
    l=r['loads'][0]; d[r['variant']].append((round(l['per_second']), l['errors']))
for k in sorted(d): print(k, d[k])

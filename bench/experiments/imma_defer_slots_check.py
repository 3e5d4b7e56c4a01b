# The slot bookkeeping of the deferred imma split (ImmaArgs::defer, imma_deferred.cuh),
# simulated on the host: every tile that several warps share is found by its reader (ImmaSplit
# c0..c1 and the slot rule) in exactly the slots its contributors stored it in, in contributor
# order, and no two tiles share a slot. python3 this file.
import random
def start(w, units, warps): return w*units//warps
def warp_of(x, units, warps): return ((x+1)*warps-1)//units
for trial in range(3000):
    tiles=random.randint(1,200); upt=random.randint(1,40); units=tiles*upt
    W=random.randint(1,3000); warps=min(W,units)
    # producer
    stored={}  # (tile) -> list of (w, slot)
    written=set()
    for w in range(warps):
        x0=start(w,units,warps); cnt=start(w+1,units,warps)-x0
        first_tile=x0//upt; cu=x0-first_tile*upt; ct=first_tile; seg_whole = cu==0
        for i in range(cnt):
            if cu==upt-1 or i==cnt-1:
                whole = seg_whole and cu==upt-1
                slot = 0 if ct==first_tile else 1
                if whole: written.add(ct)
                else: stored.setdefault(ct,[]).append((w,slot))
                seg_whole=True
            cu+=1
            if cu==upt: cu=0; ct+=1
    # consumer
    for t in range(tiles):
        first=t*upt; c0=warp_of(first,units,warps); c1=warp_of(first+upt-1,units,warps)
        if c0==c1:
            assert t in written and t not in stored, (trial,t)
        else:
            exp=[(c, 1 if (c==c0 and start(c0,units,warps)<first) else 0) for c in range(c0,c1+1)]
            assert stored.get(t)==exp, (trial,t,stored.get(t),exp)
    # no two tiles store into the same (w, slot)
    allslots=[s for v in stored.values() for s in v]
    assert len(allslots)==len(set(allslots))
print("ok")

import torch, numba_gemm
from numba import cuda
n=4096
a=torch.randn((n,n),device="cuda").to(torch.bfloat16); b=torch.randn((n,n),device="cuda").to(torch.bfloat16)
c=torch.empty((n,n),device="cuda",dtype=torch.bfloat16)
for _ in range(5): numba_gemm.matmul(a,b,c)
cuda.synchronize()

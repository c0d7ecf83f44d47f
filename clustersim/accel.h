/* What clustersim's optional C accelerators share (clustersim/accel.py loads them).
 *
 * Refuse to build where double arithmetic would round differently from Python's: with
 * -ffast-math (reassociation, no signed zeros), or where doubles are evaluated in extended
 * precision (x87). setup.py also turns off contraction into fused multiply-adds
 * (-ffp-contract=off). A refused build is skipped: the Python runs instead. */
#ifndef CLUSTERSIM_ACCEL_H
#define CLUSTERSIM_ACCEL_H
#include <float.h>

#ifdef __FAST_MATH__
#error "built with -ffast-math: results would not match the Python"
#endif
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "doubles are not evaluated as doubles: results would not match the Python"
#endif
#endif

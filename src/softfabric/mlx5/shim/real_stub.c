/* Link-time stand-in for "libmlx5-real.so.1": gives libmlx5.so.1 (the stand-in) a DT_NEEDED entry of that name.
 * At run time the name resolves, next to the stand-in, to a symbolic link to the system's real libmlx5. */
int softfabric_mlx5_real_stub;

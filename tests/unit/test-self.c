/* corral in a container: which container it is, and where the engine
 * finds a file corral wrote there (engine/self.c). */
#include "engine/self.h"

#include "tap.h"

#include <string.h>

#define ID "abcf66afa33233dfcf7f58da8fcb5f616b73f93c7fcd3b92709a0a6b4dee831c"

static void id_rows(void)
{
        char id[80];
        const char *podman = "82 53 0:40 / / rw,relatime - overlay overlay rw,upperdir=/x/diff\n"
                             "89 82 254:0 /run/containers/storage/overlay-containers/" ID
                             "/userdata/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n";
        ok(self_container_id_from(podman, id, sizeof(id)) == 0 && strcmp(id, ID) == 0,
           "Podman's /etc/hostname source names the container");
        const char *docker = "1 0 0:1 / / rw - overlay overlay rw\n"
                             "2 1 8:1 /var/lib/docker/containers/" ID
                             "/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n";
        ok(self_container_id_from(docker, id, sizeof(id)) == 0 && strcmp(id, ID) == 0,
           "and Docker's");
        const char *other =
            "2 1 8:1 /var/lib/docker/containers/" ID "/hostname /etc/hosts rw - ext4 /dev/sda1 rw\n"
            "3 1 8:1 /srv/ABCF66AFA33233DFCF7F58DA8FCB5F616B73F93C7FCD3B92709A0A6B4"
            "DEE831C/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n"
            "4 1 8:1 /srv/" ID "0/hostname /etc/hostname rw - ext4 /dev/sda1 rw";
        is_int(self_container_id_from(other, id, sizeof(id)), -ENOENT,
               "not another mount's, nor upper-case or 65 digits");
        is_int(self_container_id_from("", id, sizeof(id)), -ENOENT, "nothing in nothing");
        is_int(self_container_id_from(docker, id, 64), -ENOENT, "nor into too small a buffer");
}

static void path_rows(void)
{
        json_auto_t *in = json_pack(
            "{s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}], s:{s:{s:s}}}", "Mounts", "Destination",
            "/state", "Source", "/home/me/.local/state/corral", "Destination", "/state/deep",
            "Source", "/vol/deep/_data", "Destination", "/rel", "Source", "relative", "GraphDriver",
            "Data", "UpperDir", "/var/lib/containers/storage/overlay/L/diff");
        char out[512];
        struct err e = {0};
        ok(self_engine_path_from(in, "/tmp/corral-0/seccomp-1.json", true, out, sizeof(out), NULL,
                                 &e) == 0 &&
               strcmp(out, "/var/lib/containers/storage/overlay/L/diff/tmp/corral-0/"
                           "seccomp-1.json") == 0,
           "a file on the root filesystem: in the writable layer (%s)", out);
        ok(self_engine_path_from(in, "/state/x.json", true, out, sizeof(out), NULL, &e) == 0 &&
               strcmp(out, "/home/me/.local/state/corral/x.json") == 0,
           "under a mount: through its source, whatever the device says (%s)", out);
        ok(self_engine_path_from(in, "/state/deep/y", false, out, sizeof(out), NULL, &e) == 0 &&
               strcmp(out, "/vol/deep/_data/y") == 0,
           "the deepest mount wins (%s)", out);
        ok(self_engine_path_from(in, "/statefile", true, out, sizeof(out), NULL, &e) == 0 &&
               strncmp(out, "/var/lib/containers", 19) == 0,
           "a name that only starts like a mount is not under it");
        is_int(self_engine_path_from(in, "/rel/z", false, out, sizeof(out), NULL, &e), -ENOENT,
               "a mount without an absolute source is no way (%s)", e.msg);
        is_int(self_engine_path_from(in, "/tmp/s.json", false, out, sizeof(out), NULL, &e), -ENOENT,
               "a tmpfs (not the root's device) is no way: %s", e.msg);
        json_auto_t *tmpfs =
            json_pack("{s:[{s:s, s:s}, {s:s, s:s}]}", "Mounts", "Destination", "/data", "Source",
                      "/vol/v/_data", "Destination", "/data/run", "Type", "tmpfs");
        const char *via = NULL;
        is_int(self_engine_path_from(tmpfs, "/data/run/corral/s.json", false, out, sizeof(out),
                                     &via, &e),
               -ENOENT, "a tmpfs listed under a volume is no way, not the volume (%s)", e.msg);
        ok(self_engine_path_from(tmpfs, "/data/s.json", false, out, sizeof(out), &via, &e) == 0 &&
               strcmp(out, "/vol/v/_data/s.json") == 0 && via && strcmp(via, "/data") == 0,
           "beside it, the volume, and which mount it went through");
        is_int(self_engine_path_from(in, "/state/../etc/x", false, out, sizeof(out), NULL, &e),
               -EINVAL, "a path with .. is refused, not appended (%s)", e.msg);
        is_int(self_engine_path_from(in, "tmp/x", true, out, sizeof(out), NULL, &e), -EINVAL,
               "and a relative one");
        json_auto_t *bare = json_object();
        is_int(self_engine_path_from(bare, "/tmp/s.json", true, out, sizeof(out), NULL, &e),
               -ENOENT, "nor is a container without a writable layer the engine names");
        is_int(self_engine_path_from(in, "/tmp/s.json", true, out, 20, NULL, &e), -ENAMETOOLONG,
               "a path longer than the buffer is refused, not cut");
}

int main(void)
{
        id_rows();
        path_rows();
        return done_testing();
}

"""A MuJoCo model as a viser scene, for viewing the cell in a browser without Isaac Sim.

Each geom MuJoCo's own renderer draws (the geom groups `mujoco.MjvOption` shows by default) becomes one viser mesh,
triangulated once in the geom's frame and sent with its colour. After that only poses travel: `update(data)` sets
each moving geom's position and orientation from `data.geom_xpos` / `data.geom_xmat` (geoms welded to the world
never move and are sent once), and resends a colour when the model's changed (the task repaints the episode's
object). Geom types: plane (drawn as its finite rectangle, or `INFINITE_PLANE` metres wide), sphere, capsule,
ellipsoid, cylinder, box, mesh. Height fields and SDFs are not drawn; `skipped` names them.
"""

from __future__ import annotations

import mujoco
import numpy as np
import trimesh
import viser

INFINITE_PLANE = 10.0  # m: the side of the square drawn for a plane of size 0 (MuJoCo's infinite plane)
DEFAULT_GEOM_RGBA = (0.5, 0.5, 0.5, 1.0)  # MuJoCo's default geom colour: a geom left at it shows its material's
G = mujoco.mjtGeom
FLAT = (G.mjGEOM_PLANE, G.mjGEOM_BOX, G.mjGEOM_CYLINDER)  # shared vertices at their edges: shade per face


def drawn_geoms(model: mujoco.MjModel) -> np.ndarray:
    """The geom ids MuJoCo's renderer draws by default: those in a visible group (mjvOption.geomgroup)."""
    groups = np.flatnonzero(mujoco.MjvOption().geomgroup)
    return np.flatnonzero(np.isin(model.geom_group, groups))


def geom_rgba(model: mujoco.MjModel, g: int) -> np.ndarray:
    """The colour MuJoCo draws geom `g` in: its own rgba, or its material's when the rgba is left at the default."""
    rgba = model.geom_rgba[g]
    if model.geom_matid[g] >= 0 and np.allclose(rgba, DEFAULT_GEOM_RGBA):
        return model.mat_rgba[model.geom_matid[g]].copy()
    return rgba.copy()


def geom_mesh(model: mujoco.MjModel, g: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(vertices (V, 3), faces (F, 3)) of geom `g` in its own frame, or None for a type not drawn."""
    size, kind = model.geom_size[g], G(model.geom_type[g])
    if kind == G.mjGEOM_PLANE:
        hx, hy = (s if s > 0 else INFINITE_PLANE / 2 for s in size[:2])
        vertices = np.array([[-hx, -hy, 0.0], [hx, -hy, 0.0], [hx, hy, 0.0], [-hx, hy, 0.0]])
        return vertices, np.array([[0, 1, 2], [0, 2, 3]])  # counter-clockwise seen from +z, the side MuJoCo draws
    if kind in (G.mjGEOM_SPHERE, G.mjGEOM_ELLIPSOID):
        mesh = trimesh.creation.icosphere(subdivisions=3)
        radii = size[:1].repeat(3) if kind == G.mjGEOM_SPHERE else size[:3]
        return mesh.vertices * radii, mesh.faces
    if kind == G.mjGEOM_CAPSULE:
        mesh = trimesh.creation.capsule(height=2 * size[1], radius=size[0], count=(24, 24))
    elif kind == G.mjGEOM_CYLINDER:
        mesh = trimesh.creation.cylinder(radius=size[0], height=2 * size[1], sections=32)
    elif kind == G.mjGEOM_BOX:
        mesh = trimesh.creation.box(extents=2 * size[:3])
    elif kind == G.mjGEOM_MESH:
        m = model.geom_dataid[g]
        v0, nv = model.mesh_vertadr[m], model.mesh_vertnum[m]
        f0, nf = model.mesh_faceadr[m], model.mesh_facenum[m]
        # Compiled mesh vertices are already in the geom's frame (MuJoCo moved the geom to the mesh's frame).
        return model.mesh_vert[v0 : v0 + nv].astype(float), model.mesh_face[f0 : f0 + nf].copy()
    else:
        return None
    return np.asarray(mesh.vertices), np.asarray(mesh.faces)


def geom_poses(data: mujoco.MjData, geoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World positions (n, 3) and orientations as viser's w, x, y, z quaternions (n, 4) of `geoms`."""
    wxyz = np.empty((len(geoms), 4))
    for i, g in enumerate(geoms):
        mujoco.mju_mat2Quat(wxyz[i], data.geom_xmat[g])
    return data.geom_xpos[geoms].copy(), wxyz


class ViserScene:
    """The drawn geoms of `model` as meshes under `root` in `server`'s scene; `handles[g]` is geom g's mesh.

    Args:
        server: the viser server (or a client's handle) to draw into.
        model: the compiled model; its geom colours are read again at every `update`.
        data: the state the meshes start at (default: the model's reference configuration after forward kinematics).
    """

    def __init__(
        self, server: viser.ViserServer, model: mujoco.MjModel, data: mujoco.MjData | None = None, root: str = "/mujoco"
    ):
        self.server, self.model = server, model
        if data is None:
            data = mujoco.MjData(model)
            mujoco.mj_forward(model, data)
        self.handles: dict[int, viser.MeshHandle] = {}
        self.skipped: list[str] = []
        self._rgba: dict[int, np.ndarray] = {}
        geoms = drawn_geoms(model)
        positions, wxyz = geom_poses(data, geoms)
        for g, pos, quat in zip(geoms, positions, wxyz):
            name = model.geom(g).name or f"geom{g}"
            mesh = geom_mesh(model, g)
            if mesh is None:
                self.skipped.append(name)
                continue
            rgba = self._rgba[g] = geom_rgba(model, g)
            self.handles[int(g)] = server.scene.add_mesh_simple(
                f"{root}/{model.body(model.geom_bodyid[g]).name}/{g}_{name}",
                mesh[0],
                mesh[1],
                color=rgb255(rgba),
                opacity=None if rgba[3] >= 1 else float(rgba[3]),
                flat_shading=G(model.geom_type[g]) in FLAT,
                wxyz=quat,
                position=pos,
                visible=bool(rgba[3] > 0),
            )
        # Geoms of bodies welded to the world (weld id 0) keep the pose they were added with.
        drawn = np.array(sorted(self.handles), dtype=int)
        self.moving = drawn[model.body_weldid[model.geom_bodyid[drawn]] != 0]

    def update(self, data: mujoco.MjData) -> None:
        """Move the meshes to `data`'s geom poses and take up changed geom colours, applied by clients at once."""
        positions, wxyz = geom_poses(data, self.moving)
        with self.server.atomic():
            for g, pos, quat in zip(self.moving, positions, wxyz):
                handle = self.handles[g]
                handle.position, handle.wxyz = pos, quat
            for g, handle in self.handles.items():
                rgba = geom_rgba(self.model, g)
                if not np.array_equal(rgba, self._rgba[g]):
                    self._rgba[g] = rgba
                    handle.color = rgb255(rgba)
                    handle.visible = bool(rgba[3] > 0)


def rgb255(rgba) -> tuple[int, int, int]:
    """An RGB(A) colour in [0, 1] as viser's 8-bit RGB."""
    return tuple(int(round(255 * float(np.clip(c, 0.0, 1.0)))) for c in rgba[:3])

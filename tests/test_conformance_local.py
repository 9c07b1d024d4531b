from rlkit.testing import CommunicatorConformance


class TestLocalConformance(CommunicatorConformance):
    communicator = "local"
